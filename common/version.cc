#include "common/version.h"

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

}  // namespace xserv
