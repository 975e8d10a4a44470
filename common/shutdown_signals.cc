#include "common/shutdown_signals.h"

#include <signal.h>

namespace xserv {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(std::chrono::milliseconds timeout) {
  const sigset_t set = ShutdownSet();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec t{.tv_sec = static_cast<time_t>(ns / 1'000'000'000),
                   .tv_nsec = static_cast<long>(ns % 1'000'000'000)};
  const int sig = sigtimedwait(&set, nullptr, &t);
  return sig == SIGTERM || sig == SIGINT ? sig : 0;
}

void UnblockAllSignals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace xserv
