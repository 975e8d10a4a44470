// Launchers of the normalisation kernels (norm.cu). Host API only; CudaBackend validates first
// (ops_norm.cc). bf16 rows in and out, bf16 weight/bias, fp32 statistics.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

struct NormArgs {
  RowsView x;            // bf16 [rows, cols]; with `combine`, only its rows and cols are used
  RowsView residual;     // bf16 [rows, cols], data == nullptr: no residual add
  // bf16 [rows, cols] that gets residual + x instead of residual itself (data == nullptr: in
  // place); must not overlap residual.
  RowsView residual_out;
  RowsView out;          // bf16 [rows, cols]; may alias x (or residual)
  const void* weight = nullptr;  // bf16 [cols]
  const void* bias = nullptr;    // bf16 [cols], LayerNorm only
  float eps = 1e-6f;
  bool pdl = false;  // launch with programmatic dependent launch (pdl.cuh)
  // RmsNorm with a residual only, where RmsNormTakesCombine: x's rows are the MoE combine of these
  // rows, rounded to bf16 exactly as LaunchMoeCombine stores them (moe_combine.cuh).
  MoeCombineRows combine;
  // Non-null: the normalised rows also quantised for the W8A8 GEMM exactly as
  // LaunchQuantizeFp8Rows would quantise `out` (fp8_quant.h: codes [rows, cols] contiguous, scales
  // per row and 128 columns at fp8_scales[g * fp8_scale_stride + row], the stride
  // Fp8ActScaleStride(rows)). RmsNorm rows the vector kernel takes (RmsNormTakesVectors),
  // cols % 128 == 0, no combine.
  uint8_t* fp8_codes = nullptr;
  float* fp8_scales = nullptr;
  int64_t fp8_scale_stride = 0;
};

// Whether LaunchRmsNorm takes `args` with a combine in place of x: rows of whole 16-byte
// vectors, 512 < cols <= 16384 (the register-resident kernel), aligned residual, out and weight.
bool RmsNormTakesCombine(const NormArgs& args);

// Whether RmsNorm rows of `cols` take the vector kernel (whole 16-byte vectors, 512 < cols <=
// 16384, given 16-byte aligned rows and weight), whose steps the GEMV's norm prologue repeats
// (rms_norm_vec.cuh): the rows the two compute alike.
bool RmsNormTakesVectors(int64_t cols);

// Whether LaunchRmsNorm takes `args` with NormArgs::fp8_codes set (the pointers aside): the
// vector kernel's rows (aligned, RmsNormTakesVectors), cols % 128 == 0, no combine.
bool RmsNormTakesFp8Codes(const NormArgs& args);

// RMSNorm; with a residual, residual += x first (stored in bf16, in residual_out if given) and the
// norm is of the stored sum.
cudaError_t LaunchRmsNorm(const NormArgs& args, cudaStream_t stream);
// LayerNorm with weight and bias (residual must be empty).
cudaError_t LaunchLayerNorm(const NormArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
