#include "worker/engine/step_phases.h"

#include "absl/strings/str_format.h"

namespace xserv::engine {

std::optional<std::string> StepPhaseTimes::Report(Clock::time_point now, Clock::duration window) {
  if (now - window_start_ < window) return std::nullopt;
  if (steps_ == 0) return std::nullopt;
  const double seconds = std::chrono::duration<double>(now - window_start_).count();
  const auto per_step = [&](StepPhase phase) {
    return std::chrono::duration<double, std::milli>(sums_[static_cast<int>(phase)]).count() /
           static_cast<double>(steps_);
  };
  std::string line = absl::StrFormat(
      "engine: %d steps in %.1f s (%.1f/s, %.1f seqs and %.1f tokens each); per step: schedule "
      "%.3f ms, prepare %.3f ms, forward (host) %.3f ms, stream %.3f ms, sample (incl. device "
      "wait) %.3f ms, results %.3f ms",
      steps_, seconds, static_cast<double>(steps_) / seconds,
      static_cast<double>(seqs_) / static_cast<double>(steps_),
      static_cast<double>(tokens_) / static_cast<double>(steps_), per_step(StepPhase::kSchedule),
      per_step(StepPhase::kPrepare), per_step(StepPhase::kForward), per_step(StepPhase::kStream),
      per_step(StepPhase::kSample), per_step(StepPhase::kResults));
  window_start_ = now;
  sums_ = {};
  steps_ = seqs_ = tokens_ = 0;
  return line;
}

}  // namespace xserv::engine
