// FP8 E4M3 weights with block scales, on the host: the layout of HF "fp8" checkpoints
// (Qwen3-8B-FP8: weight F8_E4M3 [rows, cols], weight_scale_inv [ceil(rows/b), ceil(cols/b)],
// value = code * scale_inv of its b x b block) and the quantiser that makes it from a
// higher-precision matrix (xserv-make-model --fp8-block, xserv-worker --quantization fp8).
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace xserv::kernels {

struct Fp8Blocks {
  std::vector<uint8_t> codes;   // E4M3 [rows, cols]
  std::vector<float> scale_inv; // [ceil(rows/b), ceil(cols/b)], each exactly a bf16 value
};

// Each block's scale_inv = bf16(amax / 448) (1 for an all-zero block); codes = E4M3(value /
// scale_inv), round to nearest even, saturating at +-448. The scale is rounded before the codes
// are made, so storing it as bf16 loses nothing.
Fp8Blocks QuantizeFp8Blocks(std::span<const float> values, int64_t rows, int64_t cols,
                            int64_t block);

// values[i, j] = E4M3(codes[i, j]) * scale_inv[i / block, j / block] (exact in f32).
void DequantizeFp8Blocks(const Fp8Blocks& q, int64_t rows, int64_t cols, int64_t block,
                         std::span<float> values);

// The [rows, cols] weight of `codes` and its block x block `scale_inv` as a [cols, rows] one:
// both transposed (square blocks stay blocks), the same values.
Fp8Blocks TransposeFp8Blocks(std::span<const uint8_t> codes, std::span<const float> scale_inv,
                             int64_t rows, int64_t cols, int64_t block);

// A weight's block scales (Fp8Blocks::scale_inv, [ceil(rows/b), ceil(cols/b)]) repeated for
// each of its rows, column-group-major: out[g * rows + r] = scale_inv[r / b, g]. The same values
// in the layout of a scale per row and b columns (cuBLASLt's VEC128 mode for the weight, which
// the W8A8 GEMM takes at small batches: kernels/cuda/gemm.h).
std::vector<float> Fp8RowScales(std::span<const float> scale_inv, int64_t rows, int64_t cols,
                                int64_t block);

// One group of `values` to E4M3 `codes` (as many): returns the group's scale = amax / 448 in f32
// (1 where that is 0: an all-zero group, or one whose amax / 448 underflows; not rounded
// further), codes = E4M3(value / scale), round to nearest even, saturating. The arithmetic of
// every dynamic quantiser here (activations, the FP8 KV cache's (token, head) rows) and of its
// CUDA twins.
float QuantizeFp8Group(std::span<const float> values, uint8_t* codes);

// Dynamic per-row quantisation of activations for W8A8 GEMMs: each row's groups of `group`
// columns quantised by QuantizeFp8Group. The reference of the CUDA kernel
// (kernels/cuda/fp8_quant.h), which must give the same codes and scales.
struct Fp8Rows {
  std::vector<uint8_t> codes;  // E4M3 [rows, cols]
  std::vector<float> scales;   // [rows, ceil(cols / group)]
};
Fp8Rows QuantizeFp8Rows(std::span<const float> values, int64_t rows, int64_t cols, int64_t group);

}  // namespace xserv::kernels
