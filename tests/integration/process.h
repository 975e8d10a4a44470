// Child processes for integration tests: start a built binary with arguments, wait for the port
// it writes to --port-file, stop it with a signal and collect its exit status. Output goes to a
// log file under the test's temp dir, printed when a test fails.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace xserv::testing {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();  // SIGKILL if still running

  // Starts `binary` (a name in the build's bin directory) with `args` and `--port 0
  // --port-file F` appended (the router and the supervisor also get `--grpc-port 0` unless
  // `args` names one: concurrent tests must not share the default public gRPC port); returns false if it did not write its port within `timeout`.
  bool StartServer(const std::string& binary, std::vector<std::string> args,
                   std::chrono::milliseconds timeout = std::chrono::seconds(60));

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const;

  // Sends `sig` and waits up to `timeout`; returns the exit code (128 + signal if killed by one),
  // or -1 on timeout.
  int Stop(int sig = SIGTERM, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  bool Running();

 private:
  pid_t pid_ = -1;    // negated once reaped
  pid_t group_ = -1;  // the process group the child leads (killed as a whole at the end)
  int port_ = 0;
  int exit_status_ = -1;
  std::string log_path_;
};

// Starts `binary` as StartServer does, expecting a refusal: true when it exited with a non-zero
// code within `timeout` without serving. `log` gets its output either way.
bool StartIsRefused(const std::string& binary, std::vector<std::string> args, std::string* log,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The first of `n` consecutive ports on 127.0.0.1 that were free a moment ago, picked at random
// outside the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), where outgoing
// connections and port-0 listeners take theirs: for flags that need a fixed port, such as the
// supervisor's --worker-base-port.
int FreePortRun(int n);

std::string BinaryPath(const std::string& name);
std::string SourcePath(const std::string& relative);
std::string MakeTempDir();

}  // namespace xserv::testing
