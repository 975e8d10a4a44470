// Where the engine loop's time goes: the host phases around each device step, summed over a
// window and reported as per-step averages (the worker logs one line per window while it works).
// "forward" is the host side of the model step (batch inputs, launches or a graph replay);
// "sample" includes waiting for the device to finish it. Pure bookkeeping; loop thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace xserv::engine {

// kStream: the previous step's tokens handed to their streams while the device runs this one;
// kResults: after the device finished, this step's results built and the scheduler updated
// (host time no device work overlaps).
enum class StepPhase { kSchedule, kPrepare, kForward, kStream, kSample, kResults };
inline constexpr int kNumStepPhases = 6;

class StepPhaseTimes {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StepPhaseTimes(Clock::time_point start) : window_start_(start) {}

  void Add(StepPhase phase, Clock::duration elapsed) {
    sums_[static_cast<int>(phase)] += elapsed;
  }
  // One device step ran, with `seqs` sequences and `tokens` tokens.
  void CountStep(int64_t seqs, int64_t tokens) {
    ++steps_;
    seqs_ += seqs;
    tokens_ += tokens;
  }
  // The window's report when at least `window` has passed since it began and a step ran; the
  // next window then begins at `now`. Otherwise nothing (an idle window just grows).
  std::optional<std::string> Report(Clock::time_point now, Clock::duration window);

 private:
  Clock::time_point window_start_;
  std::array<Clock::duration, kNumStepPhases> sums_{};
  int64_t steps_ = 0, seqs_ = 0, tokens_ = 0;
};

// Adds the time from construction to destruction to one phase.
class ScopedPhase {
 public:
  ScopedPhase(StepPhaseTimes& times, StepPhase phase)
      : times_(times), phase_(phase), start_(StepPhaseTimes::Clock::now()) {}
  ~ScopedPhase() { times_.Add(phase_, StepPhaseTimes::Clock::now() - start_); }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  StepPhaseTimes& times_;
  StepPhase phase_;
  StepPhaseTimes::Clock::time_point start_;
};

}  // namespace xserv::engine
