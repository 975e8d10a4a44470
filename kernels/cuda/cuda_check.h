// Converting CUDA runtime, cuBLAS and NCCL error codes into absl::Status at launcher boundaries.
// Launchers return the Status; the worker ends itself on any device error (a poisoned context
// is never reused), so callers do not retry.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace xserv::cuda {

inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

}  // namespace xserv::cuda

// RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(...)) returns an InternalError naming the call.
#define RETURN_IF_CUDA_ERROR(expr)                                             \
  do {                                                                         \
    ::absl::Status xserv_cuda_status_ = ::xserv::cuda::CudaStatus((expr), #expr); \
    if (!xserv_cuda_status_.ok()) return xserv_cuda_status_;                   \
  } while (false)
