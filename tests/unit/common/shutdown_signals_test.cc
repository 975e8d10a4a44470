// SIGTERM/SIGINT reach main() through WaitForShutdownSignal, whichever thread the kernel hands
// them to: one that blocks them (sigtimedwait) or one started before the mask existed, as
// OpenBLAS starts its pool before main() (the recording handler).
#include "common/shutdown_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace xserv {
namespace {

using std::chrono::milliseconds;

TEST(ShutdownSignals, TimeoutWithoutASignalIsZero) {
  BlockShutdownSignals();
  EXPECT_EQ(WaitForShutdownSignal(milliseconds(20)), 0);
}

TEST(ShutdownSignals, ProcessSignalIsReturnedOnce) {
  BlockShutdownSignals();
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_EQ(WaitForShutdownSignal(milliseconds(2000)), SIGINT);
  EXPECT_EQ(WaitForShutdownSignal(milliseconds(20)), 0);
}

TEST(ShutdownSignals, SignalToAThreadThatNeverBlockedItIsRecordedNotFatal) {
  // The thread starts before the mask, like a library's pool started by a load-time constructor.
  sigset_t none;
  sigemptyset(&none);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &none, nullptr), 0);
  std::atomic<bool> release = false;
  std::thread library_thread([&] {
    while (!release) std::this_thread::sleep_for(milliseconds(1));
  });
  BlockShutdownSignals();
  // Thread-directed: without the recording handler the default action ends this process.
  ASSERT_EQ(pthread_kill(library_thread.native_handle(), SIGTERM), 0);
  int sig = 0;
  for (int i = 0; i < 100 && sig == 0; ++i) sig = WaitForShutdownSignal(milliseconds(20));
  release = true;
  library_thread.join();
  EXPECT_EQ(sig, SIGTERM);
  EXPECT_EQ(WaitForShutdownSignal(milliseconds(20)), 0);
}

}  // namespace
}  // namespace xserv
