// DeviceStep wire format: what the leader broadcasts each step must come back identical, and a
// peer must refuse (never crash on, never half-apply) truncated, extended or corrupted bytes.
#include "worker/engine/device_step.h"

#include <random>

#include "gtest/gtest.h"

namespace xserv::engine {
namespace {

DeviceStep Sample() {
  DeviceStep step;
  step.swap_out = {{3, 100}, {4, 101}};
  step.copies = {{7, 8}};
  step.swap_in = {{200, 9}};
  step.chunks.push_back(DeviceChunk{.tokens = {1, 2, 3, 4},
                                    .start_position = 0,
                                    .block_table = {5},
                                    .logits = model::LogitsRows::kAll});
  step.chunks.push_back(DeviceChunk{.tokens = {42},
                                    .start_position = 17,
                                    .block_table = {6, 10},
                                    .logits = model::LogitsRows::kLast});
  step.chunks.push_back(DeviceChunk{.tokens = {9, 9},
                                    .start_position = 30,
                                    .block_table = {11, 12},
                                    .logits = model::LogitsRows::kNone});
  return step;
}

void ExpectEqual(const DeviceStep& a, const DeviceStep& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.swap_out, b.swap_out);
  EXPECT_EQ(a.copies, b.copies);
  EXPECT_EQ(a.swap_in, b.swap_in);
  ASSERT_EQ(a.chunks.size(), b.chunks.size());
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    EXPECT_EQ(a.chunks[i].tokens, b.chunks[i].tokens);
    EXPECT_EQ(a.chunks[i].start_position, b.chunks[i].start_position);
    EXPECT_EQ(a.chunks[i].block_table, b.chunks[i].block_table);
    EXPECT_EQ(a.chunks[i].logits, b.chunks[i].logits);
  }
}

TEST(DeviceStep, RoundTripsEveryKind) {
  const DeviceStep step = Sample();
  auto parsed = ParseDeviceStep(SerializeDeviceStep(step));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectEqual(*parsed, step);
  EXPECT_EQ(step.LogitsRowCount(), 4 + 1);
  for (DeviceStep::Kind kind : {DeviceStep::Kind::kIdle, DeviceStep::Kind::kStop}) {
    auto control = ParseDeviceStep(SerializeDeviceStep(DeviceStep{.kind = kind}));
    ASSERT_TRUE(control.ok()) << control.status();
    EXPECT_EQ(control->kind, kind);
    EXPECT_TRUE(control->chunks.empty());
  }
}

TEST(DeviceStep, RefusesEveryTruncationAndTrailingBytes) {
  const std::string bytes = SerializeDeviceStep(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(ParseDeviceStep(std::string_view(bytes).substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "prefix of " << n << " bytes";
  }
  EXPECT_FALSE(ParseDeviceStep(bytes + '\0').ok());
}

TEST(DeviceStep, RefusesBadKindModeAndCounts) {
  std::string bytes = SerializeDeviceStep(Sample());
  std::string bad_kind = bytes;
  bad_kind[0] = 9;
  EXPECT_FALSE(ParseDeviceStep(bad_kind).ok());
  std::string huge_count = bytes;  // the swap_out count claims far more pairs than the bytes hold
  huge_count[1] = '\xff';
  huge_count[2] = '\xff';
  huge_count[3] = '\xff';
  huge_count[4] = '\x7f';
  EXPECT_FALSE(ParseDeviceStep(huge_count).ok());
  std::string negative = bytes;
  negative[4] = '\x80';  // swap_out count < 0
  EXPECT_FALSE(ParseDeviceStep(negative).ok());
}

TEST(DeviceStep, RandomCorruptionNeverCrashes) {
  const std::string bytes = SerializeDeviceStep(Sample());
  std::mt19937 rng(5);
  int refused = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string corrupt = bytes;
    for (int k = 0; k < 3; ++k) corrupt[rng() % corrupt.size()] = static_cast<char>(rng());
    refused += ParseDeviceStep(corrupt).ok() ? 0 : 1;  // either outcome is fine; no crash
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace xserv::engine
