// xserv-bench's progress output: the bar's arithmetic, redrawing in place on a terminal, and
// plain lines (only the final one within the period) elsewhere.
#include "tools/bench/progress.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace xserv::tools {
namespace {

std::string Captured(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), f)) out.append(buffer, n);
  return out;
}

TEST(Progress, RendersTheBar) {
  EXPECT_EQ(RenderProgress("c 4", 3, 12, 1.25, 8), "c 4 [##......]  3/12  1.2 s");
  EXPECT_EQ(RenderProgress("x", 5, 5, 0, 4), "x [####] 5/5  0.0 s");
  EXPECT_EQ(RenderProgress("x", 0, 0, 0, 2), "x [##] 0/0  0.0 s");
}

TEST(Progress, RedrawsOnATerminalAndPrintsLinesElsewhere) {
  std::FILE* tty = std::tmpfile();
  {
    Progress p("level", 2, tty, /*terminal=*/true);
    p.Add();
    p.Add();
    p.Finish();
  }
  const std::string drawn = Captured(tty);
  EXPECT_EQ(drawn.find('\r'), 0u);
  EXPECT_NE(drawn.find("1/2"), std::string::npos);
  EXPECT_NE(drawn.find("2/2"), std::string::npos);
  EXPECT_EQ(drawn.back(), '\n');
  std::fclose(tty);

  std::FILE* log = std::tmpfile();
  {
    Progress p("level", 3, log, /*terminal=*/false, /*plain_every_s=*/3600);
    p.Add();
    p.Add();
    p.Add();
    p.Finish();
  }
  const std::string plain = Captured(log);
  EXPECT_EQ(plain.find('\r'), std::string::npos);
  EXPECT_EQ(plain.find("\033["), std::string::npos);
  EXPECT_EQ(plain.find("1/3"), std::string::npos);  // within the period: only the final line
  EXPECT_NE(plain.find("3/3"), std::string::npos);
  std::fclose(log);
}

}  // namespace
}  // namespace xserv::tools
