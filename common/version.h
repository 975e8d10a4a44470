// Build identity of this binary: version, git commit and build options, written into every
// benchmark result and reported by Info / --version.
#pragma once

#include <string>

namespace xserv {

struct BuildInfo {
  const char* version;     // project version, e.g. "0.1.0"
  const char* git_commit;  // full hash of HEAD at build time, or "unknown"
  bool git_dirty;          // the work tree had uncommitted changes when built
  const char* build_type;  // CMAKE_BUILD_TYPE
  bool cuda_enabled;       // the CUDA backend was compiled in
  const char* compiler;    // e.g. "GNU 12.2.0"
};

const BuildInfo& GetBuildInfo();

// "xserv 0.1.0 (commit abcdef012345[-dirty], Release, cuda on)".
std::string VersionString();

// The other identity fields of a result file: the current UTC time as "2026-11-29T20:58:31Z",
// and this machine's CPU model from /proc/cpuinfo ("unknown" when it cannot be read).
std::string UtcTimestamp();
std::string CpuModelName();

}  // namespace xserv
