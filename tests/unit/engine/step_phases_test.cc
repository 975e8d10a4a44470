// StepPhaseTimes: per-step averages over a window, reported once the window has passed and a
// step ran, then reset.
#include "worker/engine/step_phases.h"

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace xserv::engine {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(StepPhaseTimes, ReportsPerStepAveragesOncePerWindow) {
  const StepPhaseTimes::Clock::time_point t0{};
  StepPhaseTimes times(t0);
  times.Add(StepPhase::kSchedule, milliseconds(2));
  times.Add(StepPhase::kSample, milliseconds(30));
  times.CountStep(8, 8);
  times.Add(StepPhase::kSchedule, milliseconds(4));
  times.Add(StepPhase::kSample, milliseconds(10));
  times.Add(StepPhase::kResults, milliseconds(1));
  times.Add(StepPhase::kStream, milliseconds(3));
  times.CountStep(4, 132);
  EXPECT_FALSE(times.Report(t0 + seconds(9), seconds(10)).has_value()) << "window not over";
  const std::optional<std::string> line = times.Report(t0 + seconds(10), seconds(10));
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("2 steps in 10.0 s (0.2/s, 6.0 seqs and 70.0 tokens each)"),
            std::string::npos)
      << *line;
  EXPECT_NE(line->find("schedule 3.000 ms"), std::string::npos) << *line;
  EXPECT_NE(line->find("prepare 0.000 ms"), std::string::npos) << *line;
  EXPECT_NE(line->find("sample (incl. device wait) 20.000 ms"), std::string::npos) << *line;
  EXPECT_NE(line->find("stream 1.500 ms"), std::string::npos) << *line;
  EXPECT_NE(line->find("results 0.500 ms"), std::string::npos) << *line;
  // The next window starts empty: no report without a step, averages of its own steps only.
  EXPECT_FALSE(times.Report(t0 + seconds(30), seconds(10)).has_value());
  times.Add(StepPhase::kForward, milliseconds(6));
  times.CountStep(1, 1);
  const std::optional<std::string> next = times.Report(t0 + seconds(40), seconds(10));
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(next->find("1 steps in 30.0 s"), std::string::npos) << *next;
  EXPECT_NE(next->find("schedule 0.000 ms"), std::string::npos) << *next;
  EXPECT_NE(next->find("forward (host) 6.000 ms"), std::string::npos) << *next;
}

TEST(StepPhaseTimes, ScopedPhaseAddsItsLifetime) {
  const auto start = StepPhaseTimes::Clock::now();
  StepPhaseTimes times(start);
  {
    ScopedPhase phase(times, StepPhase::kPrepare);
    std::this_thread::sleep_for(milliseconds(20));
  }
  times.CountStep(1, 1);
  const std::optional<std::string> line =
      times.Report(start + seconds(1), std::chrono::nanoseconds(0));
  ASSERT_TRUE(line.has_value());
  const size_t at = line->find("prepare ");
  ASSERT_NE(at, std::string::npos);
  const double ms = std::stod(line->substr(at + 8));
  EXPECT_GE(ms, 20.0);
  EXPECT_LT(ms, 2000.0);
}

}  // namespace
}  // namespace xserv::engine
