// Injected clock for the engine's pure logic. The scheduler reads time only through a Clock so
// tests can drive it by hand and stay deterministic.
//
// A Clock is owned by whoever builds the engine (main() or a test) and must outlive every
// object that holds a pointer to it. SteadyClock may be called from any thread; ManualClock is
// not synchronised and is meant for single-threaded tests.
#pragma once

#include <chrono>

namespace xserv::engine {

using Time = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Time Now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  Time Now() const override { return std::chrono::steady_clock::now(); }
};

// Starts at the steady_clock epoch and moves only when Advance() is called.
class ManualClock final : public Clock {
 public:
  Time Now() const override { return now_; }
  void Advance(std::chrono::nanoseconds delta) { now_ += delta; }

 private:
  Time now_{};
};

}  // namespace xserv::engine
