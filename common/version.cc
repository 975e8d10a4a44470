#include "common/version.h"

#include <ctime>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/version_info.h"  // generated at build time by common/version.cmake

namespace xserv {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{
      .version = XSERV_VERSION,
      .git_commit = XSERV_GIT_COMMIT,
      .git_dirty = XSERV_GIT_DIRTY != 0,
      .build_type = XSERV_BUILD_TYPE,
      .cuda_enabled = XSERV_CUDA_ENABLED != 0,
      .compiler = XSERV_COMPILER,
  };
  return info;
}

std::string VersionString() {
  const BuildInfo& info = GetBuildInfo();
  const std::string commit(info.git_commit);
  return absl::StrCat("xserv ", info.version, " (commit ", commit.substr(0, 12),
                      info.git_dirty ? "-dirty" : "", ", ", info.build_type, ", cuda ",
                      info.cuda_enabled ? "on" : "off", ")");
}

std::string UtcTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      const size_t start = line.find_first_not_of(' ', colon + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return "unknown";
}

}  // namespace xserv
