#include "common/status.h"

#include "spdlog/spdlog.h"

namespace xserv::internal {

void CheckFailed(const char* file, int line, const char* condition) {
  spdlog::critical("check failed at {}:{}: {}", file, line, condition);
  spdlog::shutdown();  // flush every sink before dying
  std::fprintf(stderr, "xserv: check failed at %s:%d: %s\n", file, line, condition);
  std::abort();
}

}  // namespace xserv::internal
