// Synchronous handling of SIGTERM / SIGINT for xserv's long-running binaries: main() blocks them
// before starting any thread (every thread inherits the mask), then polls with
// WaitForShutdownSignal from the main thread. No async signal handlers, so shutdown logic is
// ordinary code.
#pragma once

#include <chrono>

namespace xserv {

// Blocks SIGTERM and SIGINT in the calling thread; call first thing in main().
void BlockShutdownSignals();

// Waits up to `timeout` for SIGTERM or SIGINT; returns the signal number, or 0 on timeout.
int WaitForShutdownSignal(std::chrono::milliseconds timeout);

// Clears the signal mask (in a forked child before exec, so it handles signals normally).
void UnblockAllSignals();

}  // namespace xserv
