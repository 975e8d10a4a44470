// The profiler's hold (op_profiler.h): one thread sleeping on the device's global timer.
#include "kernels/cuda/sleep.h"

namespace xserv::kernels::cuda {
namespace {

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SleepKernel(uint64_t ns) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) __nanosleep(10000);
}

}  // namespace

cudaError_t LaunchSleep(int64_t microseconds, cudaStream_t stream) {
  SleepKernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds) * 1000);
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
