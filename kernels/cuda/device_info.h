// Facts about the visible CUDA devices and the CUDA libraries loaded at run time, for start-up
// logs, Info responses and benchmark result files. Any thread may call these.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int num_sms = 0;
  size_t total_memory_bytes = 0;
  size_t free_memory_bytes = 0;
};

struct RuntimeInfo {
  int driver_version = 0;   // e.g. 13000 for CUDA 13.0
  int runtime_version = 0;
  int cublas_version = 0;   // cublasLtGetVersion(), e.g. 130000
  int nccl_version = 0;     // ncclGetVersion(), e.g. 22803
  std::vector<DeviceInfo> devices;
};

// Fails only when the CUDA driver cannot be queried; zero devices is a valid answer.
absl::StatusOr<RuntimeInfo> QueryRuntime();

// One line per device plus library versions, for logs.
std::string Describe(const RuntimeInfo& info);

}  // namespace xserv::cuda
