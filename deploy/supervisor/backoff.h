// RestartBackoff: exponential restart delays for a process group that keeps failing, reset once
// it has stayed up long enough. Pure logic (time passed in), unit-tested.
#pragma once

#include <algorithm>
#include <chrono>

namespace xserv::supervisor {

class RestartBackoff {
 public:
  using Duration = std::chrono::milliseconds;
  RestartBackoff(Duration initial = std::chrono::seconds(1), Duration max = std::chrono::seconds(30),
                 Duration stable = std::chrono::seconds(60))
      : initial_(initial), max_(max), stable_(stable) {}

  // Called when the group failed after running for `uptime`; returns the delay before restart.
  Duration OnFailure(Duration uptime) {
    if (uptime >= stable_) failures_ = 0;  // it had recovered: start the sequence again
    Duration delay = initial_;
    for (int i = 0; i < failures_ && delay < max_; ++i) delay *= 2;
    ++failures_;
    return std::min(delay, max_);
  }
  int failures() const { return failures_; }

 private:
  Duration initial_, max_, stable_;
  int failures_ = 0;
};

}  // namespace xserv::supervisor
