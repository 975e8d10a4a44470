#include "tests/integration/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace xserv::testing {

// The build tree's paths, unless the environment names others: on the GPU host the binaries
// run from a bundle and the tree is a copy elsewhere (scripts/gpu/env.sh sets both).
std::string BinaryPath(const std::string& name) {
  const char* dir = std::getenv("XSERV_BIN_DIR");
  return std::string(dir != nullptr ? dir : XSERV_BIN_DIR) + "/" + name;
}

std::string SourcePath(const std::string& relative) {
  const char* dir = std::getenv("XSERV_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : XSERV_SOURCE_DIR) + "/" + relative;
}

namespace {

// Every directory MakeTempDir made in this process, removed when it exits (a full test run makes
// thousands: left behind they filled a 250 GB disk); XSERV_KEEP_TEST_DIRS=1 keeps them.
std::mutex temp_dirs_mu;
std::vector<std::string>* temp_dirs = nullptr;

void RemoveTempDirs() {
  if (std::getenv("XSERV_KEEP_TEST_DIRS") != nullptr) return;
  std::lock_guard<std::mutex> lock(temp_dirs_mu);
  for (const std::string& dir : *temp_dirs) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

}  // namespace

std::string MakeTempDir() {
  std::string templ = "/tmp/xserv-test-XXXXXX";
  const std::string dir = mkdtemp(templ.data());
  std::lock_guard<std::mutex> lock(temp_dirs_mu);
  if (temp_dirs == nullptr) {
    temp_dirs = new std::vector<std::string>();  // never freed: atexit may run late
    std::atexit(RemoveTempDirs);
  }
  temp_dirs->push_back(dir);
  return dir;
}

ChildProcess::~ChildProcess() {
  // The whole process group: a supervisor's workers and router die with it even when the test
  // ends (or fails) without stopping it, instead of living on as orphans holding ports.
  if (group_ > 0) kill(-group_, SIGKILL);
  if (pid_ > 0 && Running()) Stop(SIGKILL, std::chrono::seconds(5));
}

bool ChildProcess::StartServer(const std::string& binary, std::vector<std::string> args,
                               std::chrono::milliseconds timeout) {
  const std::string dir = MakeTempDir();
  const std::string port_file = dir + "/port";
  log_path_ = dir + "/" + binary + ".log";
  args.insert(args.begin(), BinaryPath(binary));
  args.insert(args.end(), {"--port", "0", "--port-file", port_file});
  if ((binary == "xserv-router" || binary == "xserv-supervisor") &&
      std::find(args.begin(), args.end(), "--grpc-port") == args.end()) {
    args.insert(args.end(), {"--grpc-port", "0"});
  }
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);  // a group of its own (see the destructor)
    const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    // The test runner may block signals; the child must start with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid_ > 0) {
    setpgid(pid_, pid_);  // also from here, so the group exists before either side runs on
    group_ = pid_;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    if (in >> port_ && port_ > 0) return true;
    if (!Running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int FreePortRun(int n) {
  std::mt19937 rng(std::random_device{}());
  const auto bindable = [](int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    const int one = 1;  // as gRPC binds: a port in TIME_WAIT is free to it
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return ok;
  };
  // Below the ephemeral range as this machine sets it (Linux's default starts at 32768), or
  // above it when it starts too low to leave room.
  int ephemeral_lo = 32768, ephemeral_hi = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_lo >> ephemeral_hi;
  int low = 20000, high = std::min(ephemeral_lo, 32768);
  if (high - low < 1000 + n) low = std::max(ephemeral_hi + 1, 20000), high = 65535;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int base = low + static_cast<int>(rng() % static_cast<unsigned>(high - low - n));
    bool all = true;
    for (int p = base; p < base + n && all; ++p) all = bindable(p);
    if (all) return base;
  }
  return low;  // never in practice; the server that cannot bind then says so
}

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -pid_;
    return false;
  }
  return r == 0;
}

bool StartIsRefused(const std::string& binary, std::vector<std::string> args, std::string* log,
                    std::chrono::milliseconds timeout) {
  ChildProcess process;
  const bool served = process.StartServer(binary, std::move(args), timeout);
  const bool exited = !process.Running();
  const int code = process.Stop(SIGKILL);
  *log = process.Log();
  return !served && exited && code != 0;
}

int ChildProcess::Stop(int sig, std::chrono::milliseconds timeout) {
  if (pid_ > 0) kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Running()) return exit_status_;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

}  // namespace xserv::testing
