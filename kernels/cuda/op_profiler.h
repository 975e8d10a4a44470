// OpProfiler: GPU time per op of the CUDA backend, for finding where a step's time goes (the
// engine benchmark's --profile-ops). Off unless CudaBackendOptions::profile_ops is set.
//
// How: an event is recorded on the stream after every op; once the host has waited for the
// stream, the time between consecutive events is charged to the later op. Hold() first occupies
// the stream with a sleeping kernel so that the host can queue a whole step behind it: the step's
// ops then run back to back and each interval is that op's own execution time, host launch
// overhead excluded (which the caller measures separately as the time to enqueue the step).
//
// Thread-compatible, used by the backend's one thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xserv::kernels::cuda {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0;
  double bytes = 0;  // what the calls declared they must read at least (0: not declared)
};

class OpProfiler {
 public:
  OpProfiler() = default;
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // The stream sleeps `microseconds` on the device, then a start mark is recorded.
  absl::Status Hold(int64_t microseconds, cudaStream_t stream);
  // After an op was queued: charge the time since the previous mark to `op`, which declares it
  // had to read at least `bytes` (for a bandwidth figure; 0: none).
  absl::Status Record(std::string op, cudaStream_t stream, double bytes = 0);
  // After the host waited for the stream: turn the marks recorded so far into times. The
  // interval before the first mark after a collect has no owner and is dropped unless Hold()
  // began it.
  absl::Status Collect();
  // Totals since the last Take, largest first; resets them.
  std::vector<OpTime> Take();

 private:
  absl::StatusOr<cudaEvent_t> NewEvent();

  cudaEvent_t start_ = nullptr;  // the mark intervals are measured from (null: none yet)
  struct Mark {
    std::string op;
    double bytes = 0;
    cudaEvent_t event = nullptr;
  };
  std::vector<Mark> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, OpTime> totals_;
};

}  // namespace xserv::kernels::cuda
