#include "kernels/cuda/device_info.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/cuda/cuda_check.h"

namespace xserv::cuda {

absl::StatusOr<RuntimeInfo> QueryRuntime() {
  RuntimeInfo info;
  RETURN_IF_CUDA_ERROR(cudaDriverGetVersion(&info.driver_version));
  RETURN_IF_CUDA_ERROR(cudaRuntimeGetVersion(&info.runtime_version));
  info.cublas_version = static_cast<int>(cublasLtGetVersion());
  if (ncclGetVersion(&info.nccl_version) != ncclSuccess) info.nccl_version = 0;

  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err == cudaErrorNoDevice || count_err == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return info;
  }
  RETURN_IF_CUDA_ERROR(count_err);
  // cudaMemGetInfo reads the current device, so each is made current in turn; the caller's
  // current device comes back afterwards (a backend's allocations must stay on its stream's
  // device: a worker that saw two GPUs once allocated its KV cache on the second).
  int current = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&current));
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, i));
    DeviceInfo device{.ordinal = i,
                      .name = prop.name,
                      .compute_capability_major = prop.major,
                      .compute_capability_minor = prop.minor,
                      .num_sms = prop.multiProcessorCount,
                      .total_memory_bytes = prop.totalGlobalMem};
    RETURN_IF_CUDA_ERROR(cudaSetDevice(i));
    size_t total = 0;
    RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&device.free_memory_bytes, &total));
    info.devices.push_back(std::move(device));
  }
  RETURN_IF_CUDA_ERROR(cudaSetDevice(current));
  return info;
}

std::string Describe(const RuntimeInfo& info) {
  std::string out = absl::StrFormat("driver %d, runtime %d, cublasLt %d, nccl %d, %d device(s)",
                                    info.driver_version, info.runtime_version,
                                    info.cublas_version, info.nccl_version, info.devices.size());
  for (const DeviceInfo& d : info.devices) {
    absl::StrAppendFormat(&out, "\n  [%d] %s sm_%d%d, %d SMs, %.1f GiB total, %.1f GiB free",
                          d.ordinal, d.name, d.compute_capability_major,
                          d.compute_capability_minor, d.num_sms,
                          d.total_memory_bytes / 1073741824.0, d.free_memory_bytes / 1073741824.0);
  }
  return out;
}

}  // namespace xserv::cuda
