// The per-tile steps of the decode attention with the keys as the MMA's M dimension
// (decode_attention.cu, kKeysAsM). A GQA decode tile holds few query rows (Qwen3-8B: 4 query
// heads per kv head and one new row), so with the query rows as M (flash_tile.cuh) three
// quarters of every m16 MMA multiply zeros. Transposed, the products are
//   S^T = K Q^T   M = 16 keys, N = 8 query columns, K = head dims: kDim / 16 MMAs;
//   O^T = V^T P^T M = head dims, N = 8 query columns, K = 16 keys:  kDim / 16 MMAs;
// half the MMAs of the row form per 16-key tile, and half its output accumulators (kDim / 4
// floats per lane instead of kDim / 2), which leaves room for more CTAs per SM.
// A lane (g = lane / 4, q4 = lane % 4) holds:
//   st[e]      score of key g + 8 * (e / 2), query column 2 q4 + e % 2;
//   ot[mt][e]  output of query column 2 q4 + e % 2 at O^T row 16 mt + g + 8 * (e / 2), whose
//              dim is KeysAsMOutputDim's;
//   qb[kt]     the B fragments of Q^T for k16 step kt (query column g).
// Softmax runs per query column: its max reduces over the 8 lanes of a q4 (shuffles by 4, 8, 16)
// every tile; each lane keeps its own partial sum l of the column, reduced once at the end (the
// rescales are uniform across the column). P^T's B fragments come from the score accumulators by
// movmatrix.trans.
// FP8 cache: the codes convert to f16 in registers as in flash_tile.cuh. Q K^T uses its FP8 dim
// order (LoadQueryFragmentsFp8Order's); for V^T the O^T rows are permuted so that a lane's dims
// of a key row are one contiguous run (kDim / 8 codes at kDim / 8 * g).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/mma.cuh"

namespace xserv::kernels::cuda {

// The dim of ot[mt][e]: bf16 cache, 16 mt + g + 8 (e / 2); FP8 cache, kDim / 8 g + 2 mt + e / 2.
template <int kDim, bool kFp8>
__device__ __forceinline__ int KeysAsMOutputDim(int mt, int e, int g) {
  return kFp8 ? kDim / 8 * g + 2 * mt + e / 2 : 16 * mt + g + 8 * (e / 2);
}

// Q^T's B fragments from the query rows staged in shared memory (row c = query column c, row
// stride kLd): b0 = dims 2 q4, 2 q4 + 1 of the k16 step, b1 = + 8, + 9 (FP8: in the FP8 order,
// as f16), the same values as the row form's A fragments a0 and a2 of row g.
template <int kDim, int kLd, bool kFp8>
__device__ __forceinline__ void LoadQueryColumns(uint32_t (&qb)[kDim / 16][2],
                                                 const __nv_bfloat16* q_s, int lane) {
  uint32_t qa[kDim / 16][4];
  if constexpr (kFp8) {
    LoadQueryFragmentsFp8Order<kDim, kLd>(qa, q_s, lane);
  } else {
    LoadQueryFragments<kDim, kLd>(qa, q_s, lane);
  }
#pragma unroll
  for (int kt = 0; kt < kDim / 16; ++kt) qb[kt][0] = qa[kt][0], qb[kt][1] = qa[kt][2];
}

// st += K Q^T over a 16-key tile of bf16 rows (row stride kLd): K's A fragments by ldmatrix
// (lane l addresses key l % 8 + 8 * ((l / 8) % 2), dims 8 * (l / 16) of the k16 step).
template <int kDim, int kLd>
__device__ __forceinline__ void KeysAsMScores(float (&st)[4], const uint32_t (&qb)[kDim / 16][2],
                                              const __nv_bfloat16* k_s, int lane) {
  const __nv_bfloat16* row = k_s + (lane % 8 + 8 * ((lane / 8) % 2)) * kLd + 8 * (lane / 16);
#pragma unroll
  for (int kt = 0; kt < kDim / 16; ++kt) {
    uint32_t a[4];
    LdMatrixX4(a, row + 16 * kt);
    MmaBf16(st, a, qb[kt][0], qb[kt][1]);
  }
}

// st += K Q^T over a 16-key tile of FP8 codes (rows code_ld bytes apart): lane (g, q4) reads
// kDim / 4 contiguous codes of keys g and g + 8 (the FP8 order); the caller applies the K scales.
template <int kDim>
__device__ __forceinline__ void KeysAsMScoresFp8(float (&st)[4],
                                                 const uint32_t (&qb)[kDim / 16][2],
                                                 const unsigned char* codes, int code_ld,
                                                 int lane) {
  static_assert(kDim % 64 == 0, "a lane's codes are whole 16-byte loads");
  const unsigned char* r0 = codes + (lane / 4) * code_ld + kDim / 4 * (lane % 4);
  const unsigned char* r8 = r0 + 8 * code_ld;
#pragma unroll
  for (int v = 0; v < kDim / 64; ++v) {
    const uint4 u0 = *reinterpret_cast<const uint4*>(r0 + 16 * v);
    const uint4 u8 = *reinterpret_cast<const uint4*>(r8 + 16 * v);
    const uint32_t w0[4] = {u0.x, u0.y, u0.z, u0.w}, w8[4] = {u8.x, u8.y, u8.z, u8.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {  // k16 step 4 v + w: dims 0, 1 (a0, a1) and 2, 3 (a2, a3)
      const uint32_t a[4] = {Fp8PairToF16x2(static_cast<uint16_t>(w0[w])),
                             Fp8PairToF16x2(static_cast<uint16_t>(w8[w])),
                             Fp8PairToF16x2(static_cast<uint16_t>(w0[w] >> 16)),
                             Fp8PairToF16x2(static_cast<uint16_t>(w8[w] >> 16))};
      MmaF16(st, a, qb[4 * v + w][0], qb[4 * v + w][1]);
    }
  }
}

// Scales a tile's scores (by `scale`, FP8: times each key's K scale) and masks them: key k0 + j
// counts for column c when first[c] <= key <= pos[c] (c: the lane's columns 2 q4, 2 q4 + 1); a
// counted key whose bit j of key_bad is set marks the column bad. `whole` (warp-uniform): every
// column counts every key and none is bad. col_max: the lane's max of each of its columns.
template <bool kFp8>
__device__ __forceinline__ void KeysAsMScaleAndMask(float (&st)[4], float (&col_max)[2],
                                                    bool whole, int k0, const int (&first)[2],
                                                    const int (&pos)[2], uint32_t key_bad,
                                                    bool (&bad)[2], float scale,
                                                    const float* k_scales, int g) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int c = e % 2, j = g + 8 * (e / 2), key = k0 + j;
    const float s = st[e] * (kFp8 ? scale * k_scales[j] : scale);
    if (whole) {
      st[e] = s;
    } else {
      const bool valid = key >= first[c] && key <= pos[c];
      bad[c] = bad[c] || (valid && ((key_bad >> j) & 1u) != 0);
      st[e] = valid ? s : -INFINITY;
    }
    col_max[c] = fmaxf(col_max[c], st[e]);
  }
}

// Max over the 8 lanes holding a query column (those of one q4).
__device__ __forceinline__ float ColumnMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 4));
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 8));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 16));
}
__device__ __forceinline__ bool ColumnAny(bool v) {
  int any = v ? 1 : 0;
  any |= __shfl_xor_sync(kFullMask, any, 4);
  any |= __shfl_xor_sync(kFullMask, any, 8);
  return (any | __shfl_xor_sync(kFullMask, any, 16)) != 0;
}
__device__ __forceinline__ float ColumnSum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 4);
  v += __shfl_xor_sync(kFullMask, v, 8);
  return v + __shfl_xor_sync(kFullMask, v, 16);
}

// Folds a tile's scaled, masked scores (log2 units) into the columns' running max m and the
// lane's partial sums l, rescales ot, and leaves the unnormalised probabilities in st. A column
// that has seen no key keeps m = -inf and adds nothing. Called by the whole warp.
template <int kDim>
__device__ __forceinline__ void KeysAsMSoftmaxUpdate(float (&st)[4], const float (&col_max)[2],
                                                     float (&m)[2], float (&l)[2],
                                                     float (&ot)[kDim / 16][4]) {
  float correction[2];
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const float m_new = fmaxf(m[c], ColumnMax(col_max[c]));
    correction[c] = m_new == -INFINITY ? 1.0f : exp2f(m[c] - m_new);
    m[c] = m_new;
    l[c] *= correction[c];
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int c = e % 2;
    st[e] = m[c] == -INFINITY ? 0.0f : exp2f(st[e] - m[c]);
    l[c] += st[e];
  }
  // As in OnlineSoftmaxUpdate: once the maxima settle most tiles move none of them.
  if (!__any_sync(kFullMask, correction[0] != 1.0f || correction[1] != 1.0f)) return;
#pragma unroll
  for (int mt = 0; mt < kDim / 16; ++mt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) ot[mt][e] *= correction[e % 2];
  }
}

// P^T's B fragments from the probabilities: b0 = keys 2 q4, 2 q4 + 1 of column g, b1 = keys
// + 8, + 9 (the transposes of the two 8x8 blocks the lanes hold). kF16: f16, else bf16.
template <bool kF16>
__device__ __forceinline__ void ProbabilityColumns(const float (&st)[4], uint32_t& b0,
                                                   uint32_t& b1) {
  b0 = MovMatrixTrans(kF16 ? PackF16x2(st[0], st[1]) : PackBf16x2(st[0], st[1]));
  b1 = MovMatrixTrans(kF16 ? PackF16x2(st[2], st[3]) : PackBf16x2(st[2], st[3]));
}

// ot += V^T P^T over a 16-key tile of bf16 rows (row stride kLd): V^T's A fragments by
// ldmatrix.trans (lane l addresses key 8 * (l / 16) + l % 8, dims 8 * ((l / 8) % 2) of the m16
// tile).
template <int kDim, int kLd>
__device__ __forceinline__ void KeysAsMAccumulate(float (&ot)[kDim / 16][4], const float (&st)[4],
                                                  const __nv_bfloat16* v_s, int lane) {
  uint32_t b0, b1;
  ProbabilityColumns<false>(st, b0, b1);
  const __nv_bfloat16* row = v_s + (8 * (lane / 16) + lane % 8) * kLd + 8 * ((lane / 8) % 2);
#pragma unroll
  for (int mt = 0; mt < kDim / 16; ++mt) {
    uint32_t a[4];
    LdMatrixX4Trans(a, row + 16 * mt);
    MmaBf16(ot[mt], a, b0, b1);
  }
}

// ot += V^T P^T over a 16-key tile of FP8 codes (rows code_ld bytes apart; v_scales the tile's
// 16 V scales): lane (g, q4) reads the kDim / 8 codes at kDim / 8 * g of keys 2 q4, 2 q4 + 1,
// 2 q4 + 8, 2 q4 + 9; byte permutes pair two keys' codes of one dim, which convert to f16 and
// take their keys' V scales in f16 (Fp8PairScaled, as in AccumulatePVFp8).
template <int kDim>
__device__ __forceinline__ void KeysAsMAccumulateFp8(float (&ot)[kDim / 16][4],
                                                     const float (&st)[4],
                                                     const unsigned char* codes, int code_ld,
                                                     const float* v_scales, int lane) {
  constexpr int kWords = kDim / 32;  // 4-byte words of a lane's run in a key row
  uint32_t b0, b1;
  ProbabilityColumns<true>(st, b0, b1);
  const int q4 = lane % 4;
  const __half2 s0 = __floats2half2_rn(v_scales[2 * q4], v_scales[2 * q4 + 1]);
  const __half2 s8 = __floats2half2_rn(v_scales[2 * q4 + 8], v_scales[2 * q4 + 9]);
  const unsigned char* r0 = codes + 2 * q4 * code_ld + kDim / 8 * (lane / 4);
  uint32_t w[4][kWords];  // keys 2 q4, 2 q4 + 1, 2 q4 + 8, 2 q4 + 9
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const unsigned char* r = r0 + (k % 2 + 8 * (k / 2)) * code_ld;
    if constexpr (kWords == 4) {
      const uint4 u = *reinterpret_cast<const uint4*>(r);
      w[k][0] = u.x, w[k][1] = u.y, w[k][2] = u.z, w[k][3] = u.w;
    } else {
      static_assert(kWords == 2, "head_dim 64 or 128");
      const uint2 u = *reinterpret_cast<const uint2*>(r);
      w[k][0] = u.x, w[k][1] = u.y;
    }
  }
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    // Word i holds dims kDim / 8 g + 4 i + 0..3: O^T rows g, g + 8 of m16 tiles 2 i, 2 i + 1.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t select = h == 0 ? 0x5140 : 0x7362;  // bytes 2 h, 2 h + 1 of both keys
      const uint32_t lo = __byte_perm(w[0][i], w[1][i], select);
      const uint32_t hi = __byte_perm(w[2][i], w[3][i], select);
      const uint32_t a[4] = {Fp8PairScaled(static_cast<uint16_t>(lo), s0),
                             Fp8PairScaled(static_cast<uint16_t>(lo >> 16), s0),
                             Fp8PairScaled(static_cast<uint16_t>(hi), s8),
                             Fp8PairScaled(static_cast<uint16_t>(hi >> 16), s8)};
      MmaF16(ot[2 * i + h], a, b0, b1);
    }
  }
}

}  // namespace xserv::kernels::cuda
