// MXFP4 (W4A16) mixture of experts on tensor cores: routing alignment, a grouped GEMM that decodes
// the expert weights in registers, and the weighted combine. See moe_mxfp4.h for the data flow.
//
// GEMM tile: one CTA per (block of 16 pair rows of one expert, 64 output rows). The block's 16 A
// rows (bf16, whole K) are staged in shared memory once; each of the 4 warps owns two n8 tiles
// and streams their weight rows straight from global memory. For a 32-input MXFP4 group (16
// bytes) the mma.sync m16n8k16 B fragments of thread q = lane % 4 (row n = lane / 4) need inputs
// 2q, 2q+1, 2q+8, 2q+9 of each half: bytes q, q+4, q+8, q+12, i.e. byte q of each 32-bit word.
// The 4 threads of a row load 4 consecutive groups (64 contiguous bytes, several quads of groups
// ahead of their use) and a quad byte transpose (two shuffles per word) gives each thread its
// bytes of all 4 groups. A byte becomes two bf16 through a 256-entry table and
// one bf16x2 multiply by the group's power-of-two scale, both exact, so the tensor cores see
// exactly the dequantised weights the CPU backend computes with. fp32 accumulation in a fixed
// K order; a row's result does not depend on the other rows of its block.
//
// For a few tokens a GEMV form (MoeMxfp4GemvKernel) streams each pair's expert rows with wide
// loads instead; see its tile comment.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_mxfp4.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kGemmWarps = 4;
constexpr int kGemmThreads = kGemmWarps * kWarpSize;
constexpr int kTileN = kGemmWarps * 16;  // two n8 tiles per warp
constexpr int kAPad = 8;                 // bf16 per A row: conflict-free fragment loads
constexpr int kLutWords = 256;
constexpr int kQuadsInFlight = 4;        // quads of weight groups loaded ahead of their MMAs
constexpr int kAlignThreads = 1024;

// bf16 bits of the E2M1 code (bit 3 sign; 0, 0.5, 1, 1.5, 2, 3, 4, 6).
__device__ __forceinline__ uint32_t Fp4Bf16Bits(uint32_t code) {
  constexpr uint16_t kMagnitude[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0,
                                      0x4000, 0x4040, 0x4080, 0x40C0};
  return kMagnitude[code & 7] | ((code & 8) << 12);
}

// 2^(s - 127) as bf16 bits, twice (E8M0 scale; s = 0 is the subnormal 2^-127, 255 infinity).
__device__ __forceinline__ uint32_t ScaleBf16x2(uint32_t s) {
  const uint32_t bits = s == 0 ? 0x0040u : (s << 7);
  return bits | (bits << 16);
}

__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162 y = *reinterpret_cast<const __nv_bfloat162*>(&b);
  x = __hmul2(x, y);
  return *reinterpret_cast<const uint32_t*>(&x);
}

// The 4 lanes of a quad (lane & ~3) hold words M[0..3]; lane q gets T with byte d = byte q of
// M[d] (a 4x4 byte transpose): one exchange of bytes with lane q ^ 1, one of halves with q ^ 2.
__device__ __forceinline__ uint32_t QuadTransposeBytes(uint32_t w, int q) {
  const uint32_t p = __shfl_xor_sync(kFullMask, w, 1);
  // even q: (M[q].b0, M[q+1].b0, M[q].b2, M[q+1].b2); odd q: (M[q-1].b1, M[q].b1, M[q-1].b3, M[q].b3)
  const uint32_t t = (q & 1) == 0 ? __byte_perm(w, p, 0x6240) : __byte_perm(p, w, 0x7351);
  const uint32_t u = __shfl_xor_sync(kFullMask, t, 2);
  // q < 2: low halves of lanes q and q + 2; q >= 2: high halves of lanes q - 2 and q.
  return q < 2 ? __byte_perm(t, u, 0x5410) : __byte_perm(u, t, 0x7632);
}

// Outputs c (even) and c + 1 of pair p, biases added: with a.glu the activation of that
// (gate, up) pair, bf16; otherwise both values, f32.
__device__ __forceinline__ void StoreRowPair(const MoeGemmArgs& a, int p, int c, float even,
                                             float odd) {
  if (a.glu) {
    // Clamps that keep NaN (as std::clamp and torch.clamp do; fminf would drop it).
    const float gate = even > a.limit ? a.limit : even;
    const float up = odd < -a.limit ? -a.limit : (odd > a.limit ? a.limit : odd);
    const float act = (up + 1.0f) * (gate / (1.0f + expf(-a.alpha * gate)));
    static_cast<bf16*>(a.out)[static_cast<int64_t>(p) * (a.n / 2) + c / 2] = FromFloat<bf16>(act);
  } else {
    float* y = static_cast<float*>(a.out) + static_cast<int64_t>(p) * a.n + c;
    y[0] = even;
    y[1] = odd;
  }
}

__global__ void __launch_bounds__(kAlignThreads)
    MoeAlignKernel(const int32_t* ids, int pairs, int experts, MoeRouting r) {
  __shared__ int counts[kMoeMaxExperts];
  __shared__ int first_block[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  __shared__ int total_blocks;
  for (int e = threadIdx.x; e < experts; e += kAlignThreads) {
    counts[e] = 0;
    cursor[e] = 0;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kAlignThreads) {
    const int e = ids[p];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = 0;
    for (int e = 0; e < experts; ++e) {
      first_block[e] = b;
      b += (counts[e] + kMoeBlockRows - 1) / kMoeBlockRows;
    }
    total_blocks = b;
    *r.num_blocks = b;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < total_blocks * kMoeBlockRows; i += kAlignThreads) {
    r.sorted_pairs[i] = -1;
  }
  for (int e = threadIdx.x; e < experts; e += kAlignThreads) {
    const int n = (counts[e] + kMoeBlockRows - 1) / kMoeBlockRows;
    for (int b = 0; b < n; ++b) r.block_expert[first_block[e] + b] = e;
  }
  __syncthreads();  // the padding is written before pairs overwrite their slots
  // Slots within an expert follow atomic order; no result depends on a pair's slot.
  for (int p = threadIdx.x; p < pairs; p += kAlignThreads) {
    const int e = ids[p];
    if (e < 0 || e >= experts) continue;
    r.sorted_pairs[first_block[e] * kMoeBlockRows + atomicAdd(&cursor[e], 1)] = p;
  }
}

__global__ void __launch_bounds__(kGemmThreads)
    MoeMxfp4GemmKernel(const __grid_constant__ MoeGemmArgs a) {
  const int blk = blockIdx.x;
  if (blk >= *a.routing.num_blocks) return;  // uniform across the CTA
  extern __shared__ uint32_t smem[];
  uint32_t* lut = smem;                                    // byte -> two bf16 (low nibble low)
  bf16* a_s = reinterpret_cast<bf16*>(smem + kLutWords);   // [16][k + kAPad]
  const int lda = a.k + kAPad;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int e = a.routing.block_expert[blk];
  const int32_t* pairs = a.routing.sorted_pairs + static_cast<int64_t>(blk) * kMoeBlockRows;

  for (int i = threadIdx.x; i < kLutWords; i += kGemmThreads) {
    lut[i] = Fp4Bf16Bits(i & 0xF) | (Fp4Bf16Bits(i >> 4) << 16);
  }
  const int vecs = a.k / 8;  // 16-byte vectors per A row
  for (int row = warp; row < kMoeBlockRows; row += kGemmWarps) {
    const int p = pairs[row];
    uint4* dst = reinterpret_cast<uint4*>(a_s + row * lda);
    if (p < 0) {
      for (int v = lane; v < vecs; v += kWarpSize) dst[v] = make_uint4(0, 0, 0, 0);
    } else {
      const uint4* src = reinterpret_cast<const uint4*>(RowPtr<const bf16>(a.a, p / a.a_row_div));
      for (int v = lane; v < vecs; v += kWarpSize) dst[v] = src[v];
    }
  }
  __syncthreads();

  const int g = lane / 4, q = lane % 4;
  const int groups = a.k / 32;
  const uint4* wrow[2];
  const uint8_t* srow[2];
  int col[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    col[t] = blockIdx.y * kTileN + warp * 16 + t * 8;  // first output row of the n8 tile
    const int n = min(col[t] + g, a.n - 1);            // rows past N load a valid row, unused
    const int64_t row = static_cast<int64_t>(e) * a.n + n;
    wrow[t] = reinterpret_cast<const uint4*>(a.blocks + row * groups * 16);
    srow[t] = a.scales + row * groups;
  }
  const bf16* a_lo = a_s + g * lda + 2 * q;        // A row g
  const bf16* a_hi = a_s + (g + 8) * lda + 2 * q;  // A row g + 8
  float acc[2][4] = {};
  // Weight groups go in quads of 4: thread q of a row loads group 4c + q (the row's 4 threads
  // read 64 contiguous bytes, each distinct), then a quad byte transpose hands every thread
  // byte q of each word of all 4 groups (what its fragments need, see the file comment).
  const int quads = (groups + 3) / 4;
  for (int base = 0; base < quads; base += kQuadsInFlight) {
    uint4 w[kQuadsInFlight][2];
    uint32_t sb[kQuadsInFlight][2];  // this thread's group's scale byte
#pragma unroll
    for (int c = 0; c < kQuadsInFlight; ++c) {
      const int grp = (base + c) * 4 + q;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const bool in = grp < groups;
        w[c][t] = in ? __ldg(wrow[t] + grp) : make_uint4(0, 0, 0, 0);
        sb[c][t] = in ? __ldg(srow[t] + grp) : 0u;
      }
    }
#pragma unroll
    for (int c = 0; c < kQuadsInFlight; ++c) {
      if ((base + c) * 4 >= groups) break;  // uniform: depends on the loop only
      uint4 tw[2];  // tw[t].x: byte d = byte q of word x of group 4c + d (likewise y, z, w)
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        tw[t] = make_uint4(QuadTransposeBytes(w[c][t].x, q), QuadTransposeBytes(w[c][t].y, q),
                           QuadTransposeBytes(w[c][t].z, q), QuadTransposeBytes(w[c][t].w, q));
      }
#pragma unroll
      for (int d = 0; d < 4; ++d) {
        const int grp = (base + c) * 4 + d;
        uint32_t scale[2];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          scale[t] = ScaleBf16x2(__shfl_sync(kFullMask, sb[c][t], (lane & ~3) | d));
        }
        if (grp >= groups) break;  // uniform; after the shuffles every lane joined
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // inputs 0-15, then 16-31 of the group
          const int kk = grp * 32 + half * 16;
          const uint32_t a0 = *reinterpret_cast<const uint32_t*>(a_lo + kk);
          const uint32_t a1 = *reinterpret_cast<const uint32_t*>(a_hi + kk);
          const uint32_t a2 = *reinterpret_cast<const uint32_t*>(a_lo + kk + 8);
          const uint32_t a3 = *reinterpret_cast<const uint32_t*>(a_hi + kk + 8);
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            const uint32_t lo = half == 0 ? tw[t].x : tw[t].z;
            const uint32_t hi = half == 0 ? tw[t].y : tw[t].w;
            const uint32_t b0 = MulBf16x2(lut[(lo >> (8 * d)) & 0xFF], scale[t]);
            const uint32_t b1 = MulBf16x2(lut[(hi >> (8 * d)) & 0xFF], scale[t]);
            MmaBf16(acc[t], {a0, a1, a2, a3}, b0, b1);
          }
        }
      }
    }
  }

  // Accumulator layout: acc[t][0..1] = row g, columns col + 2q, +1; acc[t][2..3] = row g + 8.
  const bf16* bias = static_cast<const bf16*>(a.bias) + static_cast<int64_t>(e) * a.n;
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int c = col[t] + 2 * q;
    if (c >= a.n) continue;  // N is even, so c + 1 < N too
    const float b_even = ToFloat(bias[c]), b_odd = ToFloat(bias[c + 1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = pairs[g + 8 * h];
      if (p < 0) continue;
      StoreRowPair(a, p, c, acc[t][2 * h] + b_even, acc[t][2 * h + 1] + b_odd);
    }
  }
}

// GEMV tile: one CTA per (pair, kGemvWarps * 2 output rows); each warp owns two adjacent rows
// (for the GLU projection a (gate, up) pair) and its lanes stride over the 32-input groups,
// kGroupsInFlight groups of both rows loaded before any is used. A byte of codes becomes two
// floats through a shared table; a group's dot product is scaled by its power of two once.
constexpr int kGemvWarps = 4;
constexpr int kGroupsInFlight = 4;

__device__ __forceinline__ float Fp4Float(uint32_t code) {
  return __uint_as_float(Fp4Bf16Bits(code) << 16);
}

// 2^(s - 127) as f32: ScaleBf16x2's high bf16 (exact in f32).
__device__ __forceinline__ float E8m0Float(uint32_t s) {
  return __uint_as_float(ScaleBf16x2(s) & 0xFFFF0000u);
}

// Sum over a group's 8 inputs of one 32-bit word of codes: w bytes hold inputs (2b, 2b + 1),
// x the 8 bf16 inputs.
__device__ __forceinline__ float DotWord(const float2* lut, uint32_t w, const float (&x)[8]) {
  float d = 0.0f;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const float2 f = lut[(w >> (8 * b)) & 0xFF];
    d = fmaf(f.x, x[2 * b], d);
    d = fmaf(f.y, x[2 * b + 1], d);
  }
  return d;
}

__global__ void __launch_bounds__(kGemvWarps * kWarpSize)
    MoeMxfp4GemvKernel(const __grid_constant__ MoeGemmArgs a) {
  __shared__ float2 lut[kLutWords];  // byte -> (low nibble, high nibble) values
  for (int i = threadIdx.x; i < kLutWords; i += kGemvWarps * kWarpSize) {
    lut[i] = make_float2(Fp4Float(i & 0xF), Fp4Float(i >> 4));
  }
  __syncthreads();
  const int p = blockIdx.y;
  const int e = a.ids[p];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int n0 = (blockIdx.x * kGemvWarps + warp) * 2;
  if (e < 0 || e >= a.experts || n0 >= a.n) return;  // no barrier below
  const bf16* x = RowPtr<const bf16>(a.a, p / a.a_row_div);
  const int groups = a.k / 32;
  const int64_t row0 = static_cast<int64_t>(e) * a.n + n0;
  const uint4* w[2] = {reinterpret_cast<const uint4*>(a.blocks + row0 * groups * 16),
                       reinterpret_cast<const uint4*>(a.blocks + (row0 + 1) * groups * 16)};
  const uint8_t* sc[2] = {a.scales + row0 * groups, a.scales + (row0 + 1) * groups};
  float acc[2] = {0.0f, 0.0f};
  for (int base = 0; base < groups; base += kGroupsInFlight * kWarpSize) {
    uint4 wv[kGroupsInFlight][2];
    uint32_t sv[kGroupsInFlight][2];
#pragma unroll
    for (int i = 0; i < kGroupsInFlight; ++i) {
      const int g = base + i * kWarpSize + lane;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        wv[i][r] = g < groups ? __ldg(w[r] + g) : make_uint4(0, 0, 0, 0);
        sv[i][r] = g < groups ? __ldg(sc[r] + g) : 0u;
      }
    }
#pragma unroll
    for (int i = 0; i < kGroupsInFlight; ++i) {
      const int g = base + i * kWarpSize + lane;
      if (g >= groups) break;  // later i are further out
      const uint4* xv = reinterpret_cast<const uint4*>(x + g * 32);
      float d[2] = {0.0f, 0.0f};
#pragma unroll
      for (int v = 0; v < 4; ++v) {  // inputs 8v .. 8v + 7: word v of the group's codes
        float xf[8];
        UnpackBf16x8(xv[v], xf);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t word = v == 0 ? wv[i][r].x : v == 1 ? wv[i][r].y
                              : v == 2 ? wv[i][r].z : wv[i][r].w;
          d[r] += DotWord(lut, word, xf);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) acc[r] = fmaf(d[r], E8m0Float(sv[i][r]), acc[r]);
    }
  }
  acc[0] = WarpSum(acc[0]);
  acc[1] = WarpSum(acc[1]);
  if (lane != 0) return;
  const bf16* bias = static_cast<const bf16*>(a.bias) + static_cast<int64_t>(e) * a.n;
  StoreRowPair(a, p, n0, acc[0] + ToFloat(bias[n0]), acc[1] + ToFloat(bias[n0 + 1]));
}

__global__ void MoeCombineKernel(const float* y, const int32_t* ids, const float* weights, int k,
                                 int experts, const RowsView out) {
  const int64_t t = blockIdx.x;
  bool bad = false;
  for (int j = 0; j < k; ++j) {
    const int e = ids[t * k + j];
    bad = bad || e < 0 || e >= experts;
  }
  bf16* o = RowPtr<bf16>(out, t);
  for (int64_t c = threadIdx.x; c < out.cols; c += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += weights[t * k + j] * y[(t * k + j) * out.cols + c];
    o[c] = bad ? QuietNaN<bf16>() : FromFloat<bf16>(sum);
  }
}

}  // namespace

cudaError_t LaunchMoeAlign(const int32_t* ids, int pairs, int experts, const MoeRouting& routing,
                           cudaStream_t stream) {
  if (experts < 1 || experts > kMoeMaxExperts) return cudaErrorInvalidValue;
  MoeAlignKernel<<<1, kAlignThreads, 0, stream>>>(ids, pairs, experts, routing);
  return cudaGetLastError();
}

int64_t MoeGemmSharedBytes(int64_t k) {
  return kLutWords * 4 + kMoeBlockRows * (k + kAPad) * 2;
}

cudaError_t LaunchMoeMxfp4Gemm(const MoeGemmArgs& args, cudaStream_t stream) {
  if (args.max_blocks == 0 || args.n == 0) return cudaSuccess;
  if (args.k % 32 != 0 || args.n % 2 != 0) return cudaErrorInvalidValue;
  const int64_t smem = MoeGemmSharedBytes(args.k);
  if (const cudaError_t err = AllowDynamicSharedMemory<MoeMxfp4GemmKernel>(smem);
      err != cudaSuccess) {
    return err;
  }
  const dim3 grid(static_cast<unsigned>(args.max_blocks),
                  static_cast<unsigned>((args.n + kTileN - 1) / kTileN));
  MoeMxfp4GemmKernel<<<grid, kGemmThreads, static_cast<size_t>(smem), stream>>>(args);
  return cudaGetLastError();
}

cudaError_t LaunchMoeMxfp4Gemv(const MoeGemmArgs& args, cudaStream_t stream) {
  const int64_t pairs = args.a.rows * args.a_row_div;  // one A row per token or per pair
  if (pairs == 0 || args.n == 0) return cudaSuccess;
  if (args.k % 32 != 0 || args.n % 2 != 0 || pairs > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((args.n / 2 + kGemvWarps - 1) / kGemvWarps),
                  static_cast<unsigned>(pairs));
  MoeMxfp4GemvKernel<<<grid, kGemvWarps * kWarpSize, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(const float* y, const int32_t* ids, const float* weights, int k,
                             int experts, const RowsView& out, cudaStream_t stream) {
  if (out.rows == 0) return cudaSuccess;
  MoeCombineKernel<<<static_cast<unsigned>(out.rows), 256, 0, stream>>>(y, ids, weights, k,
                                                                        experts, out);
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
