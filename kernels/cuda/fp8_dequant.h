// Launcher of the FP8 block-scaled weight decode (fp8_dequant.cu): the prefill path of
// CudaBackend::MatmulFp8 decodes the weight into bf16 scratch and runs the bf16 GEMM. Host API
// only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

// out[n, k] = bf16(E4M3(codes[n, k]) * scales[n / block, k / block]) for a contiguous [rows, cols]
// matrix; scales [ceil(rows / block), scale_cols].
cudaError_t LaunchDequantizeFp8(const uint8_t* codes, const float* scales, int64_t rows,
                                int64_t cols, int64_t scale_cols, int64_t block, void* out,
                                cudaStream_t stream);

}  // namespace xserv::kernels::cuda
