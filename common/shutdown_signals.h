// Synchronous handling of SIGTERM / SIGINT for xserv's long-running binaries: main() blocks them
// before starting any thread (every thread inherits the mask), then polls with
// WaitForShutdownSignal from the main thread, so shutdown logic is ordinary code.
//
// Threads that a shared library starts before main() (OpenBLAS starts its pool from a load-time
// constructor) never saw the mask: a process-directed signal arriving while the main thread is
// not inside sigtimedwait may be delivered to one of them, and the default action would end the
// process mid-drain. BlockShutdownSignals therefore also installs a handler that only records
// the signal; WaitForShutdownSignal reports a recorded signal as if it had waited for it.
#pragma once

#include <chrono>

namespace xserv {

// Blocks SIGTERM and SIGINT in the calling thread and records them if a thread that does not
// block them receives one; call first thing in main().
void BlockShutdownSignals();

// Waits up to `timeout` for SIGTERM or SIGINT; returns the signal number, or 0 on timeout.
int WaitForShutdownSignal(std::chrono::milliseconds timeout);

// Clears the signal mask (in a forked child before exec, so it handles signals normally; exec
// resets the recording handler to the default action).
void UnblockAllSignals();

}  // namespace xserv
