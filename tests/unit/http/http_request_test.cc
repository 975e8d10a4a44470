// HttpRequest's pure helpers: path / query split and percent-decoding of a path segment.
#include "router/http/http_request.h"

#include "gtest/gtest.h"

namespace xserv::http {
namespace {

TEST(HttpRequest, PathAndQuery) {
  HttpRequest req{.target = "/v1/models/a%2Fb?x=1"};
  EXPECT_EQ(req.path(), "/v1/models/a%2Fb");
  EXPECT_EQ(req.query(), "x=1");
}

TEST(PercentDecode, DecodesEscapesAndRefusesMalformedOnes) {
  EXPECT_EQ(PercentDecode("Qwen%2FQwen3-8B"), "Qwen/Qwen3-8B");
  EXPECT_EQ(PercentDecode("a%2fb%20c"), "a/b c");  // either hex case
  EXPECT_EQ(PercentDecode("plain"), "plain");
  EXPECT_EQ(PercentDecode(""), "");
  EXPECT_EQ(PercentDecode("%E2%9C%93"), "\xE2\x9C\x93");  // UTF-8 bytes pass through
  EXPECT_EQ(PercentDecode("%"), std::nullopt);
  EXPECT_EQ(PercentDecode("ab%2"), std::nullopt);
  EXPECT_EQ(PercentDecode("%zz"), std::nullopt);
  EXPECT_EQ(PercentDecode("a%00b"), std::nullopt);  // NUL would cut C strings later
}

}  // namespace
}  // namespace xserv::http
