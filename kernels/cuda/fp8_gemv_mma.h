// Launcher of the FP8-weight skinny GEMM on tensor cores (fp8_gemv_mma.cu): the same call as
// LaunchGemv with FP8 block-scaled weights (GemvArgs::scales set), out[m, n] = x[m, k] ·
// dequant(w)[n, k]^T (+ bias), for m <= 8 decode rows. CudaBackend::MatmulFp8 sends such calls
// here instead of the CUDA-core GEMV when CudaBackendOptions::fp8_gemv_mma is on and
// Fp8MmaGemvSupports says yes.
//
// Why: the CUDA-core GEMV converts every weight to f32 and multiplies it by one activation: about
// one warp instruction per 4 weight bytes, and it streamed Qwen3-8B's FP8 weights at about half
// the read bandwidth (docs/benchmarks). Here the codes become bf16 pairs by shifts and a multiply
// (no conversion instruction) and an m16n8k16 MMA takes 16 rows x 16 inputs x all 8 rows of x
// at once.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/gemv.h"

namespace xserv::kernels::cuda {

// Shared memory for x as bf16 (m * k * 2 bytes): up to 8 rows of Qwen3-8B's 12,288-input down
// projection (192 KB; the CUDA-core GEMV stops at kGemvMaxSharedBytes, and a matmul neither
// takes decodes its whole weight to bf16 each step).
inline constexpr int64_t kFp8MmaGemvMaxSharedBytes = 200 * 1024;

// FP8 weights (scales set, no GLU) with k and the block size multiples of 64, 16-byte aligned x
// and weight rows, m <= kGemvMaxRows and m * k * 2 <= kFp8MmaGemvMaxSharedBytes, bf16 or f32
// output and bias.
bool Fp8MmaGemvSupports(const GemvArgs& args);

// Rows from which CudaBackend::MatmulFp8 takes this kernel by default
// (CudaBackendOptions::fp8_gemv_mma_min_rows). Qwen3-8B FP8 decode (W8A16) on an H200, ms/step
// against the CUDA-core GEMV: 3.54 vs 3.10 at 1 row (whose GEMV also takes the block's norm),
// 3.69 vs 3.79 at 2; from 3 rows against this kernel's former f16 form: 3.95 vs 4.56 at 3, 5.00
// vs 6.75 at 8 (docs/benchmarks, session 19).
inline constexpr int kFp8MmaGemvMinRows = 2;

cudaError_t LaunchFp8MmaGemv(const GemvArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
