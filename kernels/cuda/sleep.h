// A kernel that only sleeps: the op profiler's hold (op_profiler.h). Host API only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

// Occupies `stream` for about `microseconds` (one thread sleeping on the global timer).
cudaError_t LaunchSleep(int64_t microseconds, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
