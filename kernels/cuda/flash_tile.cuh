// The per-tile steps the tensor-core attention kernels share (flash_attention.cu: 64-key tiles of
// prefill rows; decode_attention.cu: 16-key tiles of GQA-packed decode rows). A warp holds 16
// query rows as mma A fragments; a thread (g = lane / 4, q4 = lane % 4) holds rows g and g + 8:
// score sc[nt][e] is row g + 8 * (e / 2), key nt * 8 + 2 * q4 + e % 2 of the tile, and output
// o[dt][e] is the same rows, dim dt * 8 + 2 * q4 + e % 2. fp32 state throughout.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/mma.cuh"

namespace xserv::kernels::cuda {

// Scores in log2 units (scaled by log2(e)) let exp2, one MUFU op, replace exp.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Whether any of the 4 lanes holding a row (a quad) has `v` set.
__device__ __forceinline__ bool QuadAny(bool v) {
  int any = v ? 1 : 0;
  any |= __shfl_xor_sync(kFullMask, any, 1);
  any |= __shfl_xor_sync(kFullMask, any, 2);
  return any != 0;
}

template <bool kBase2>
__device__ __forceinline__ float Exp(float x) {
  if constexpr (kBase2) {
    return exp2f(x);
  } else {
    return expf(x);
  }
}

// `rows` rows of kDim FP8 codes in shared memory (code_ld bytes apart, 16-byte aligned) into
// bf16 rows (ld apart, 16-byte aligned): exact, every E4M3 value is a bf16. 16 codes per item,
// items dealt to `threads` threads from `tid`; the caller synchronises before reading `out`.
template <int kDim>
__device__ __forceinline__ void ConvertFp8Rows(const unsigned char* codes, int code_ld,
                                               __nv_bfloat16* out, int ld, int rows, int tid,
                                               int threads) {
  constexpr int kVecs = kDim / 16;
  for (int i = tid; i < rows * kVecs; i += threads) {
    const int r = i / kVecs, c = i % kVecs;
    const uint4 raw = *reinterpret_cast<const uint4*>(codes + r * code_ld + c * 16);
    const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&raw);
    uint32_t packed[8];
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const float2 f = Fp8Pair(pairs[p]);
      packed[p] = PackBf16x2(f.x, f.y);
    }
    uint4* dst = reinterpret_cast<uint4*>(out + r * ld + c * 16);
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  }
}

// The A fragments of 16 query rows staged in shared memory (first row q_s, row stride kLd).
template <int kDim, int kLd>
__device__ __forceinline__ void LoadQueryFragments(uint32_t (&qa)[kDim / 16][4],
                                                   const __nv_bfloat16* q_s, int lane) {
  const __nv_bfloat16* lo = q_s + (lane / 4) * kLd + 2 * (lane % 4);
  const __nv_bfloat16* hi = lo + 8 * kLd;
#pragma unroll
  for (int kt = 0; kt < kDim / 16; ++kt) {
    qa[kt][0] = Lds32(lo + kt * 16);
    qa[kt][1] = Lds32(hi + kt * 16);
    qa[kt][2] = Lds32(lo + kt * 16 + 8);
    qa[kt][3] = Lds32(hi + kt * 16 + 8);
  }
}

// sc += Q K^T against the kN8 * 8 key rows of a shared-memory tile (row stride kLd). The B
// fragments of two k16 steps come from one ldmatrix.x4: lane l addresses key row nt * 8 + l % 8,
// dims 8 * (l / 8) of the pair, so matrix i is dims [8i, 8i + 8) of the 32 the pair covers.
template <int kDim, int kN8, int kLd>
__device__ __forceinline__ void TileScores(float (&sc)[kN8][4], const uint32_t (&qa)[kDim / 16][4],
                                           const __nv_bfloat16* k_s, int lane) {
  static_assert(kDim % 32 == 0, "k16 steps are loaded in pairs");
#pragma unroll
  for (int nt = 0; nt < kN8; ++nt) {
    const __nv_bfloat16* kr = k_s + (nt * 8 + lane % 8) * kLd + 8 * (lane / 8);
#pragma unroll
    for (int kt = 0; kt < kDim / 16; kt += 2) {
      uint32_t b[4];
      LdMatrixX4(b, kr + kt * 16);
      MmaBf16(sc[nt], qa[kt], b[0], b[1]);
      MmaBf16(sc[nt], qa[kt + 1], b[2], b[3]);
    }
  }
}

// Scales a tile's scores (by `scale`, FP8: times each key's K scale) and masks them: key k0 + j
// counts for a row when first <= key <= pos; a counted key whose bit j of key_bad is set marks
// the row bad. `whole`: the caller knows every row counts every key and none is bad (warp-uniform)
// and skips the mask. tile_max: each of the thread's rows' max over its own scores.
template <int kN8, bool kFp8, typename Bits>
__device__ __forceinline__ void ScaleAndMaskScores(float (&sc)[kN8][4], float (&tile_max)[2],
                                                   bool whole, int k0, const int (&first)[2],
                                                   const int (&pos)[2], Bits key_bad,
                                                   bool (&bad)[2], float scale,
                                                   const float* tile_scales, int q4) {
  if (whole) {
#pragma unroll
    for (int nt = 0; nt < kN8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] *= kFp8 ? scale * tile_scales[nt * 8 + 2 * q4 + e % 2] : scale;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], sc[nt][e]);
      }
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < kN8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, j = nt * 8 + 2 * q4 + e % 2, key = k0 + j;
        const bool valid = key >= first[r] && key <= pos[r];
        bad[r] = bad[r] || (valid && ((key_bad >> j) & 1u) != 0);
        sc[nt][e] = valid ? sc[nt][e] * (kFp8 ? scale * tile_scales[j] : scale) : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], sc[nt][e]);
      }
    }
  }
}

// Folds a tile's masked, scaled scores (tile_max: each of the thread's rows' max over its own
// scores) into the rows' running max m and sum l, rescales o, and leaves the unnormalised
// probabilities in sc. A row that has seen no key keeps m = -inf and adds nothing. kBase2: the
// scores are in log2 units (scaled by log2(e)), so exp2 (one MUFU op) replaces exp.
template <int kN8, int kDim, bool kBase2 = false>
__device__ __forceinline__ void OnlineSoftmaxUpdate(float (&sc)[kN8][4], const float (&tile_max)[2],
                                                    float (&m)[2], float (&l)[2],
                                                    float (&o)[kDim / 8][4]) {
  float correction[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], QuadMax(tile_max[r]));
    correction[r] = m_new == -INFINITY ? 1.0f : Exp<kBase2>(m[r] - m_new);
    m[r] = m_new;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nt = 0; nt < kN8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2;
      sc[nt][e] = m[r] == -INFINITY ? 0.0f : Exp<kBase2>(sc[nt][e] - m[r]);
      sum[r] += sc[nt][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * correction[r] + QuadSum(sum[r]);
  // Once the rows' maxima settle most tiles change none of them: o times 1 is o, so the warp
  // skips o's kDim / 2 multiplies per lane (64 at head_dim 128, every tile otherwise).
  // Must be called by the whole warp (both kernels' tile loops are warp-uniform).
  if (!__any_sync(kFullMask, correction[0] != 1.0f || correction[1] != 1.0f)) return;
#pragma unroll
  for (int dt = 0; dt < kDim / 8; ++dt) {
    o[dt][0] *= correction[0];
    o[dt][1] *= correction[0];
    o[dt][2] *= correction[1];
    o[dt][3] *= correction[1];
  }
}

// Each probability times its key's entry of `scales` (an FP8 cache's V scales, so that P V over
// the codes is P V over the values); the normaliser has taken the probabilities already.
template <int kN8>
__device__ __forceinline__ void ScaleByKey(float (&sc)[kN8][4], const float* scales, int q4) {
#pragma unroll
  for (int nt = 0; nt < kN8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[nt][e] *= scales[nt * 8 + 2 * q4 + e % 2];
  }
}

// o += P V over the tile's kN8 / 2 slices of 16 keys: P rounded to bf16 as A fragments straight
// from the probabilities, V fragments by ldmatrix.trans from shared memory (row stride kLd).
template <int kN8, int kDim, int kLd>
__device__ __forceinline__ void AccumulatePV(float (&o)[kDim / 8][4], const float (&sc)[kN8][4],
                                             const __nv_bfloat16* v_s, int lane) {
#pragma unroll
  for (int j = 0; j < kN8 / 2; ++j) {
    const uint32_t pa[4] = {PackBf16x2(sc[2 * j][0], sc[2 * j][1]),
                            PackBf16x2(sc[2 * j][2], sc[2 * j][3]),
                            PackBf16x2(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                            PackBf16x2(sc[2 * j + 1][2], sc[2 * j + 1][3])};
    // Lane l addresses key 16j + l % 8 + 8 * ((l / 8) % 2), dims + 8 * (l / 16): the four
    // matrices are b0, b1 of dims [d, d + 8) and b0, b1 of dims [d + 8, d + 16).
    const __nv_bfloat16* vrow =
        v_s + (16 * j + lane % 8 + 8 * ((lane / 8) % 2)) * kLd + 8 * (lane / 16);
#pragma unroll
    for (int dt = 0; dt < kDim / 16; ++dt) {
      uint32_t b[4];
      LdMatrixX4Trans(b, vrow + dt * 16);
      MmaBf16(o[2 * dt], pa, b[0], b[1]);
      MmaBf16(o[2 * dt + 1], pa, b[2], b[3]);
    }
  }
}

// FP8 K and V tiles read as codes straight into f16 fragments by the hardware's E4M3 -> f16x2
// conversion (Fp8PairToF16x2: exact, one instruction per two codes; no converted copy in shared
// memory), so both products run on f16 operands: Q and P as f16 (P in [0, 1], and Q's bf16 values
// below f16's limit of 65504, as a normalised and rotated query's are), fp32 accumulators. The
// head dims take another order than the bf16 path's, the same on both sides of each product, so
// that a thread reads contiguous codes:
// - Q K^T: in k16 step kt, thread q4's slots 2 q4, 2 q4 + 1 hold dims kDim / 4 * q4 + 4 kt + 0, 1
//   and slots 2 q4 + 8, 2 q4 + 9 dims ... + 2, 3: the thread reads kDim / 4 contiguous codes of
//   its key row, each 4-code word's halves are its two B fragments, and Q's A fragments follow
//   (LoadQueryFragmentsFp8Order); the caller applies the keys' K scales to the scores;
// - P V: output column n of n8 block dt = 4 c + i is dim 32 c + 4 n + i (Fp8OutputDim): the
//   thread whose B column is n reads 4 contiguous codes of each of its 4 key rows; one byte
//   permute of two rows' words gives the code pairs of two dims, and each pair is multiplied by
//   its keys' V scales in f16 (the dequantised values, which f16 holds with more precision than
//   bf16; values below 2^-14 lose relative precision, not range).
// Code rows are 16-byte aligned, code_ld bytes apart (kDim + 16: conflict-free at kDim 128; at
// kDim 64 the score loads of two rows of a phase share banks, 2-way).
template <int kDim, int kLd>
__device__ __forceinline__ void LoadQueryFragmentsFp8Order(uint32_t (&qa)[kDim / 16][4],
                                                           const __nv_bfloat16* q_s, int lane) {
  const __nv_bfloat16* lo = q_s + (lane / 4) * kLd + kDim / 4 * (lane % 4);
  const __nv_bfloat16* hi = lo + 8 * kLd;
  const auto f16x2 = [](const __nv_bfloat16* p) {
    const __half2 h = __floats2half2_rn(__bfloat162float(p[0]), __bfloat162float(p[1]));
    return *reinterpret_cast<const uint32_t*>(&h);
  };
#pragma unroll
  for (int kt = 0; kt < kDim / 16; ++kt) {
    qa[kt][0] = f16x2(lo + 4 * kt);
    qa[kt][1] = f16x2(hi + 4 * kt);
    qa[kt][2] = f16x2(lo + 4 * kt + 2);
    qa[kt][3] = f16x2(hi + 4 * kt + 2);
  }
}

// The dim of output o[dt][e] (column 2 q4 + e % 2 of n8 block dt) in the FP8 order above.
__device__ __forceinline__ int Fp8OutputDim(int dt, int column) {
  return 32 * (dt / 4) + 4 * column + dt % 4;
}

// sc += Q K^T over kN8 * 8 key rows of FP8 codes (the order above; qa from
// LoadQueryFragmentsFp8Order). The caller applies the keys' scales to the scores.
template <int kDim, int kN8>
__device__ __forceinline__ void TileScoresFp8(float (&sc)[kN8][4],
                                              const uint32_t (&qa)[kDim / 16][4],
                                              const unsigned char* codes, int code_ld, int lane) {
  static_assert(kDim % 64 == 0, "a thread's codes are whole 16-byte loads");
#pragma unroll
  for (int nt = 0; nt < kN8; ++nt) {
    const unsigned char* row = codes + (nt * 8 + lane / 4) * code_ld + kDim / 4 * (lane % 4);
#pragma unroll
    for (int v = 0; v < kDim / 64; ++v) {
      const uint4 u = *reinterpret_cast<const uint4*>(row + 16 * v);
      const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // k16 step 4 v + w: dims 0, 1 and 2, 3 of the word
        MmaF16(sc[nt], qa[4 * v + w], Fp8PairToF16x2(static_cast<uint16_t>(words[w])),
               Fp8PairToF16x2(static_cast<uint16_t>(words[w] >> 16)));
      }
    }
  }
}

__device__ __forceinline__ uint32_t PackF16x2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two codes of one 16-bit word (low byte first) as f16x2 times their keys' scales: an FP8
// cache's dequantised values in f16.
__device__ __forceinline__ uint32_t Fp8PairScaled(uint16_t pair, __half2 scale) {
  const uint32_t raw = Fp8PairToF16x2(pair);
  const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&raw), scale);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// o += P V over one 16-key tile of FP8 codes (the order above: o's columns are Fp8OutputDim's);
// P the unnormalised probabilities, v_scales the tile's 16 V scales (shared memory).
template <int kDim>
__device__ __forceinline__ void AccumulatePVFp8(float (&o)[kDim / 8][4], const float (&sc)[2][4],
                                                const unsigned char* codes, int code_ld,
                                                const float* v_scales, int lane) {
  const uint32_t pa[4] = {PackF16x2(sc[0][0], sc[0][1]), PackF16x2(sc[0][2], sc[0][3]),
                          PackF16x2(sc[1][0], sc[1][1]), PackF16x2(sc[1][2], sc[1][3])};
  // B rows (keys) 2 q4, 2 q4 + 1 (b0) and 2 q4 + 8, 2 q4 + 9 (b1); column n = lane / 4.
  const int q4 = lane % 4;
  const __half2 s0 = __floats2half2_rn(v_scales[2 * q4], v_scales[2 * q4 + 1]);
  const __half2 s8 = __floats2half2_rn(v_scales[2 * q4 + 8], v_scales[2 * q4 + 9]);
  const unsigned char* k0 = codes + 2 * q4 * code_ld + 4 * (lane / 4);
  const unsigned char* k8 = k0 + 8 * code_ld;
#pragma unroll
  for (int c = 0; c < kDim / 32; ++c) {
    const uint32_t w0 = *reinterpret_cast<const uint32_t*>(k0 + 32 * c);
    const uint32_t w1 = *reinterpret_cast<const uint32_t*>(k0 + code_ld + 32 * c);
    const uint32_t w8 = *reinterpret_cast<const uint32_t*>(k8 + 32 * c);
    const uint32_t w9 = *reinterpret_cast<const uint32_t*>(k8 + code_ld + 32 * c);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // dims 32 c + 4 n + 2 h and + 1: bytes 2 h, 2 h + 1 of a row
      // The two rows' codes of dim 2 h, then those of dim 2 h + 1.
      const uint32_t select = h == 0 ? 0x5140 : 0x7362;
      const uint32_t lo = __byte_perm(w0, w1, select), hi = __byte_perm(w8, w9, select);
      MmaF16(o[4 * c + 2 * h], pa, Fp8PairScaled(static_cast<uint16_t>(lo), s0),
             Fp8PairScaled(static_cast<uint16_t>(hi), s8));
      MmaF16(o[4 * c + 2 * h + 1], pa, Fp8PairScaled(static_cast<uint16_t>(lo >> 16), s0),
             Fp8PairScaled(static_cast<uint16_t>(hi >> 16), s8));
    }
  }
}

}  // namespace xserv::kernels::cuda
