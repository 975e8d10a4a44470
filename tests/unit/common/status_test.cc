#include "common/status.h"

#include <string>

#include "gtest/gtest.h"

namespace xserv {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x));
  return absl::OkStatus();
}

absl::Status Chain(int x, int* calls) {
  RETURN_IF_ERROR(CheckEven(x));
  ++*calls;
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesValueAndError) {
  ASSERT_TRUE(Quarter(8).ok());
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);  // 3 is odd
  EXPECT_EQ(Quarter(5).status().message(), "odd");
}

TEST(StatusMacros, ReturnIfErrorStopsAtFirstError) {
  int calls = 0;
  EXPECT_TRUE(Chain(4, &calls).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Chain(3, &calls).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
}

TEST(StatusMacrosDeathTest, CheckAbortsWithLocation) {
  EXPECT_DEATH(XSERV_CHECK(1 + 1 == 3), "status_test.cc:[0-9]+: 1 \\+ 1 == 3");
}

}  // namespace
}  // namespace xserv
