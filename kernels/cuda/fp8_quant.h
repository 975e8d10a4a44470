// Launcher of the dynamic per-row FP8 quantisation of activations (fp8_quant.cu) that feeds the
// W8A8 GEMM (gemm.h RunFp8): kernels::QuantizeFp8Rows on the device. Host API only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

// The activation scales' layout cuBLASLt's 1x128 block scaling (VEC128_32F) reads for the
// GEMM's B operand: group g of row m at scales[g * Fp8ActScaleStride(m_rows) + m], rows contiguous
// and padded to a multiple of 4.
inline int64_t Fp8ActScaleStride(int64_t rows) { return (rows + 3) / 4 * 4; }

// x bf16 [rows, cols] (row stride ldx), cols % 128 == 0 -> codes E4M3 [rows, cols] (contiguous)
// and scales f32 in the layout above (cols / 128 groups). `pdl`: launched with programmatic
// dependent launch (pdl.cuh).
cudaError_t LaunchQuantizeFp8Rows(const void* x, int64_t ldx, int64_t rows, int64_t cols,
                                  uint8_t* codes, float* scales, cudaStream_t stream,
                                  bool pdl = false);

// The MLP's activation rows: act = silu(gate) * up, bf16 [rows, cols] each, row strides ld_*.
struct SiluMulRows {
  const void* gate = nullptr;
  int64_t ld_gate = 0;
  const void* up = nullptr;
  int64_t ld_up = 0;
  void* act = nullptr;  // may be gate itself
  int64_t ld_act = 0;
};

// LaunchSiluMul's act (stored, bit for bit as it stores it) and LaunchQuantizeFp8Rows of it, in
// one kernel.
cudaError_t LaunchSiluMulQuantizeFp8Rows(const SiluMulRows& in, int64_t rows, int64_t cols,
                                         uint8_t* codes, float* scales, cudaStream_t stream,
                                         bool pdl = false);

}  // namespace xserv::kernels::cuda
