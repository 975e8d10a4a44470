#include "common/shutdown_signals.h"

#include <signal.h>

#include <atomic>

namespace xserv {
namespace {

// Lock-free, so storing to it is async-signal-safe.
std::atomic<int> recorded_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void RecordShutdownSignal(int sig) { recorded_signal.store(sig); }

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  struct sigaction action = {};
  action.sa_handler = RecordShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the interrupted library thread carries on
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(std::chrono::milliseconds timeout) {
  if (const int sig = recorded_signal.exchange(0); sig != 0) return sig;
  const sigset_t set = ShutdownSet();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec t{.tv_sec = static_cast<time_t>(ns / 1'000'000'000),
                   .tv_nsec = static_cast<long>(ns % 1'000'000'000)};
  const int sig = sigtimedwait(&set, nullptr, &t);
  if (sig == SIGTERM || sig == SIGINT) return sig;
  return recorded_signal.exchange(0);  // one that went to another thread while we waited
}

void UnblockAllSignals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace xserv
