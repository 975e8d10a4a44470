#include "kernels/cuda/op_profiler.h"

#include <algorithm>

#include "common/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sleep.h"

namespace xserv::kernels::cuda {

OpProfiler::~OpProfiler() {
  for (Mark& mark : pending_) cudaEventDestroy(mark.event);
  for (cudaEvent_t event : free_) cudaEventDestroy(event);
  if (start_ != nullptr) cudaEventDestroy(start_);
}

absl::StatusOr<cudaEvent_t> OpProfiler::NewEvent() {
  if (!free_.empty()) {
    cudaEvent_t event = free_.back();
    free_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  RETURN_IF_CUDA_ERROR(cudaEventCreate(&event));
  return event;
}

absl::Status OpProfiler::Hold(int64_t microseconds, cudaStream_t stream) {
  RETURN_IF_ERROR(Collect());
  RETURN_IF_CUDA_ERROR(LaunchSleep(microseconds, stream));
  if (start_ == nullptr) {
    auto event = NewEvent();
    if (!event.ok()) return event.status();
    start_ = *event;
  }
  RETURN_IF_CUDA_ERROR(cudaEventRecord(start_, stream));
  return absl::OkStatus();
}

absl::Status OpProfiler::Record(std::string op, cudaStream_t stream, double bytes) {
  auto event = NewEvent();
  if (!event.ok()) return event.status();
  RETURN_IF_CUDA_ERROR(cudaEventRecord(*event, stream));
  pending_.push_back({.op = std::move(op), .bytes = bytes, .event = *event});
  return absl::OkStatus();
}

absl::Status OpProfiler::Collect() {
  if (pending_.empty()) return absl::OkStatus();
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(pending_.back().event));
  cudaEvent_t previous = start_;
  for (Mark& mark : pending_) {
    if (previous != nullptr) {
      float ms = 0;
      RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, previous, mark.event));
      OpTime& t = totals_[mark.op];
      t.op = mark.op;
      ++t.calls;
      t.total_ms += ms;
      t.bytes += mark.bytes;
    }
    if (previous != start_) free_.push_back(previous);
    previous = mark.event;
  }
  // Later intervals start at the last mark only within a hold; otherwise the host's gap between
  // steps would be charged to the next op.
  free_.push_back(previous);
  pending_.clear();
  if (start_ != nullptr) {
    free_.push_back(start_);
    start_ = nullptr;
  }
  return absl::OkStatus();
}

std::vector<OpTime> OpProfiler::Take() {
  std::vector<OpTime> out;
  for (auto& [name, t] : totals_) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) {
    return a.total_ms > b.total_ms;
  });
  totals_.clear();
  return out;
}

}  // namespace xserv::kernels::cuda
