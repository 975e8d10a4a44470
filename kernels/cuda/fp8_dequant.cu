// FP8 E4M3 block-scaled weights to bf16 (see fp8_dequant.h): each thread decodes up to 8
// consecutive codes of one row, in f32, one bf16 rounding each.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_dequant.h"

namespace xserv::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;

__global__ void __launch_bounds__(kThreads)
    DequantizeFp8Kernel(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                        int64_t scale_cols, int64_t block, __nv_bfloat16* out) {
  const int64_t groups_per_row = (cols + kPerThread - 1) / kPerThread;
  const int64_t total = rows * groups_per_row;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / groups_per_row, c0 = (i % groups_per_row) * kPerThread;
    const float* scale_row = scales + (r / block) * scale_cols;
    for (int j = 0; j < kPerThread && c0 + j < cols; ++j) {
      const int64_t c = c0 + j;
      const __half h = __half(__nv_cvt_fp8_to_halfraw(codes[r * cols + c], __NV_E4M3));
      out[r * cols + c] = __float2bfloat16_rn(__half2float(h) * scale_row[c / block]);
    }
  }
}

}  // namespace

cudaError_t LaunchDequantizeFp8(const uint8_t* codes, const float* scales, int64_t rows,
                                int64_t cols, int64_t scale_cols, int64_t block, void* out,
                                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (block < 1) return cudaErrorInvalidValue;
  const int64_t work = rows * ((cols + kPerThread - 1) / kPerThread);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((work + kThreads - 1) / kThreads,
                                                                int64_t{1} << 20));
  DequantizeFp8Kernel<<<grid, kThreads, 0, stream>>>(codes, scales, rows, cols, scale_cols, block,
                                                      static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
