// Launchers of the mixture-of-experts kernels over quantised expert weights, MXFP4 or FP8 (W4A16
// or W8A16; moe_quantized.cu). Host API only; CudaBackend::Experts validates and chunks the
// tokens first (ops_moe.cc).
//
// One MoE layer over T tokens with top-k routing runs as four launches (three for a few tokens:
// LaunchMoeGemv needs no alignment; see kMoeGemvMaxTokens):
//   1. MoeAlign: the T*k (token, slot) pairs p = t*k + j grouped by expert into blocks of
//      MoeBlockRowsFor pair rows (each expert's last block padded with -1), with each block's
//      expert;
//   2. MoeGemm (GLU): act[p] = Glu(gate_up[e] · x[t] + bias) per pair, bf16;
//   3. MoeGemm (plain): y[p] = down[e] · act[p] + bias, f32;
//   4. MoeCombine: out[t] = sum_j weights[t, j] * y[t*k + j] in slot order (deterministic).
// The GEMMs stream the expert weights (MoeWeightFormat) and decode them in registers into bf16
// tensor-core operands, exactly the bf16 weights a dense copy would hold; only experts with
// routed tokens are read.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"
#include "kernels/cuda/norm.h"

namespace xserv::kernels::cuda {

// Pair rows per block: the GEMM's M tile, 64 or 32 (four or two m16 tiles of mma.sync
// m16n8k16; the tiles of a block that hold only padding are skipped). MoeBlockRowsFor picks.
inline constexpr int kMoeBlockRows = 64;
inline constexpr int kMoeSmallBlockRows = 32;

// 32-row blocks while the experts average at most 32 pairs (gpt-oss-20b: up to 256 tokens), else
// 64. The smaller tile holds fewer registers and leaves less padding; the larger decodes each
// weight for more pairs. Measured on an H200 (xserv-moe-bench, gpt-oss-20b's experts, µs of
// gate_up): MXFP4 64 tokens 182 -> 173, 256 tokens 279 -> 268, 512 tokens 413 -> 440; FP8 64
// tokens 264 -> 203, 2048 tokens 1,615 -> 1,756 (docs/benchmarks, session 27). A row's result
// does not depend on its block, so the choice changes no result.
inline int MoeBlockRowsFor(int64_t pairs, int64_t experts) {
  return pairs <= kMoeSmallBlockRows * experts ? kMoeSmallBlockRows : kMoeBlockRows;
}

// Blocks the alignment can produce for `pairs` pairs over `experts` experts (each used expert
// pads its last block): ceil(pairs / block_rows) + min(experts, pairs).
inline int64_t MoeMaxBlocks(int64_t pairs, int64_t experts, int block_rows) {
  return (pairs + block_rows - 1) / block_rows + (experts < pairs ? experts : pairs);
}

struct MoeRouting {
  int32_t* sorted_pairs = nullptr;  // [max blocks * block_rows]: pair index or -1 (padding)
  int32_t* block_expert = nullptr;  // [max blocks]
  int32_t* num_blocks = nullptr;    // [1]
  int block_rows = kMoeBlockRows;   // kMoeBlockRows or kMoeSmallBlockRows
};

// A routing for up to max_blocks blocks of block_rows laid out in one buffer of
// MoeRoutingInts(max_blocks, block_rows) ints.
inline int64_t MoeRoutingInts(int64_t max_blocks, int block_rows) {
  return max_blocks * block_rows + max_blocks + 1;
}
// Ints of a routing buffer for up to `pairs` pairs under either block size.
inline int64_t MoeRoutingIntsFor(int64_t pairs, int64_t experts) {
  const int64_t small =
      MoeRoutingInts(MoeMaxBlocks(pairs, experts, kMoeSmallBlockRows), kMoeSmallBlockRows);
  const int64_t large = MoeRoutingInts(MoeMaxBlocks(pairs, experts, kMoeBlockRows), kMoeBlockRows);
  return small > large ? small : large;
}
inline MoeRouting MoeRoutingIn(int32_t* buffer, int64_t max_blocks, int block_rows) {
  return {.sorted_pairs = buffer,
          .block_expert = buffer + max_blocks * block_rows,
          .num_blocks = buffer + max_blocks * block_rows + max_blocks,
          .block_rows = block_rows};
}

// Groups the pairs of ids [pairs] (expert per pair; ids outside [0, experts) are left out: the
// combine poisons their tokens). experts <= kMoeMaxExperts.
inline constexpr int kMoeMaxExperts = 1024;
cudaError_t LaunchMoeAlign(const int32_t* ids, int pairs, int experts, const MoeRouting& routing,
                           cudaStream_t stream);

// How an expert matrix [E, N, K] (K a multiple of 32) is stored:
// - kMxfp4, the HF checkpoint layout: u8 blocks [E, N, K/32, 16] (two E2M1 codes per byte, low
//   nibble first) and u8 E8M0 scales [E, N, K/32];
// - kFp8: u8 E4M3 codes [E, N, K] and f32 scales [E, ceil(N/128), ceil(K/128)] of 128 x 128
//   blocks (kernels/fp8.h's layout per expert). A weight is bf16(code * bf16(scale)): the scale
//   is rounded to bf16 first, exact for scales made by quantising on load (kernels/fp8.h), and
//   the product rounds once, as a dense bf16 copy of code * scale would.
enum class MoeWeightFormat { kMxfp4, kFp8 };
inline constexpr int kMoeFp8Block = 128;

struct MoeGemmArgs {
  // A rows: pair p reads row p / a_row_div of `a` (x rows: div = k; act rows: div = 1).
  RowsView a;  // bf16 [*, K]
  int a_row_div = 1;
  MoeWeightFormat format = MoeWeightFormat::kMxfp4;
  const uint8_t* blocks = nullptr;  // kMxfp4: [E, N, K/32, 16]; kFp8: codes [E, N, K]
  const void* scales = nullptr;     // kMxfp4: u8 [E, N, K/32]; kFp8: f32 (MoeWeightFormat)
  const void* bias = nullptr;       // bf16 [E, N]
  int n = 0;                        // output features (rows of each expert matrix)
  int k = 0;                        // inputs, a multiple of 32
  MoeRouting routing;
  int max_blocks = 0;
  // glu: N interleaves gate (even) and up (odd) rows; out bf16 [pairs, N / 2] holds
  // (u + 1) * g * sigmoid(alpha * g) with g = min(gate, limit), u = clamp(up, -limit, limit).
  // Otherwise out f32 [pairs, N].
  bool glu = false;
  float limit = 7.0f;
  float alpha = 1.702f;
  void* out = nullptr;
  // LaunchMoeGemv only, instead of `routing` and `max_blocks`: pair p < a.rows * a_row_div
  // uses expert ids[p] (pairs outside [0, experts) are skipped; the combine poisons their tokens).
  const int32_t* ids = nullptr;
  int experts = 0;
  bool pdl = false;  // LaunchMoeGemv: launched programmatically (pdl.cuh)
  // LaunchMoeGemv with pdl: `ids` was written before the previous kernel's PdlWait, and
  // that kernel waits before it lets this one launch in every CTA (the down projection after the
  // gate_up GEMV). Its writer has then completed before this kernel starts, so the GEMV reads
  // the ids and loads its first weights before its own PdlWait, overlapping the gate_up's tail.
  bool ids_before_previous_wait = false;
};
cudaError_t LaunchMoeGemm(const MoeGemmArgs& args, cudaStream_t stream);

// Tokens up to which CudaBackend::ExpertsQuantized runs the GEMV form below (outside the
// batch-invariant mode, whose rows must not depend on the batch size that picks a kernel). On an
// H200 (gpt-oss-20b decode, ms/step) the GEMV against the 64-row GEMM: 3.06 vs 3.66 at two
// tokens, 4.18 vs 3.97 at four (docs/benchmarks, session 10).
inline constexpr int64_t kMoeGemvMaxTokens = 2;

// Shared memory the GEMV needs for inputs of k features (one staged input row); the GEMM's is
// fixed (static).
int64_t MoeGemvSharedBytes(int64_t k);

// MoeGemm's result for each pair (same epilogues, summation in another order) without the
// alignment: every pair streams its expert's rows itself (pairs sharing an expert meet in L2),
// the expert rows as the M of the MMA and the pair's input as a column of B.
cudaError_t LaunchMoeGemv(const MoeGemmArgs& args, cudaStream_t stream);

// out[t] = the combine of token t's rows (kernel_types.h MoeCombineRows), rounded to bf16; NaN
// rows for bad ids. The hidden size (out.cols) and out's row stride must be multiples of 4, y
// 16-byte aligned and out 8-byte aligned.
cudaError_t LaunchMoeCombine(const MoeCombineRows& rows, const RowsView& out, cudaStream_t stream,
                             bool pdl = false);

// One round of one layer's experts (the four launches above) over its buffers, as
// CudaBackend::ExpertsQuantized runs it; xserv-moe-bench times the same.
struct MoeLayerArgs {
  RowsView x;                      // bf16 [tokens, hidden]
  const int32_t* ids = nullptr;    // [tokens, top_k]
  const float* weights = nullptr;  // [tokens, top_k]
  int top_k = 0, experts = 0, hidden = 0, inter = 0;
  // As MoeGemmArgs::blocks and scales for [E, 2 inter, hidden] and [E, hidden, inter].
  MoeWeightFormat format = MoeWeightFormat::kMxfp4;
  const uint8_t* gate_up_blocks = nullptr;
  const void* gate_up_scales = nullptr;
  const void* gate_up_bias = nullptr;  // bf16 [E, 2 inter]
  const uint8_t* down_blocks = nullptr;
  const void* down_scales = nullptr;
  const void* down_bias = nullptr;     // bf16 [E, hidden]
  float limit = 7.0f, alpha = 1.702f;  // the GLU's (MoeGemmArgs)
  int32_t* routing = nullptr;          // MoeRoutingIntsFor(tokens * top_k, experts) ints
  void* act = nullptr;                 // bf16 [tokens * top_k, inter]
  float* y = nullptr;                  // [tokens * top_k, hidden]
  RowsView out;                        // bf16 [tokens, hidden]
  // The GEMV form's kernels (both projections, the combine) launch programmatically (pdl.cuh).
  bool pdl = false;
  // norm.weight set: the combine is not written to `out` but added to norm.residual and
  // normalised into norm.out in one kernel (NormArgs::combine; RmsNormTakesCombine must hold):
  // exactly LaunchMoeCombine, then LaunchRmsNorm with the residual.
  NormArgs norm;

  int BlockRows() const { return MoeBlockRowsFor(x.rows * top_k, experts); }
  int MaxBlocks() const {
    return static_cast<int>(MoeMaxBlocks(x.rows * top_k, experts, BlockRows()));
  }
  MoeGemmArgs GateUp() const;
  MoeGemmArgs Down() const;
};
// The GEMV (gemv) or the GEMM of one projection.
cudaError_t LaunchMoeProjection(const MoeGemmArgs& args, bool gemv, cudaStream_t stream);
// The alignment (GEMM only), both projections and the combine.
cudaError_t LaunchMoeLayer(const MoeLayerArgs& layer, bool gemv, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
