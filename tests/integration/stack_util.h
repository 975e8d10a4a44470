// Helpers of the whole-stack tests (supervisor -> workers -> router): demo models made by
// xserv-make-model with a real tokenizer, and the processes a supervisor started.
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/process.h"

namespace xserv::testing {

// A random tiny model of `arch` (qwen3, gpt-oss, ...) with the fetched `tokenizer` (and
// `num_layers` layers instead of the preset's 2 when > 0), or "" when
// the tokenizer was not fetched (scripts/fetch-assets.sh) or the tool failed.
inline std::string MakeTinyModel(const std::string& arch, const std::string& tokenizer,
                                 int seed = 3, int num_layers = 0) {
  const std::string tokenizer_dir = SourcePath(".assets/tokenizers/" + tokenizer);
  if (!std::filesystem::exists(tokenizer_dir + "/tokenizer.json")) return "";
  const std::string dir = MakeTempDir() + "/" + arch + "-tiny";
  const std::string cmd = BinaryPath("xserv-make-model") + " --arch " + arch +
                          " --preset tiny --seed " + std::to_string(seed) + " --tokenizer " +
                          tokenizer_dir + " --out " + dir + " --log-level warn" +
                          (num_layers > 0 ? " --num-layers " + std::to_string(num_layers) : "");
  return std::system(cmd.c_str()) == 0 ? dir : "";
}

// MakeTinyModel made once per test binary: the Qwen3 tiny model (seed 7) the router tests share.
inline const std::string& SharedQwen3TinyModel() {
  static const std::string dir = MakeTinyModel("qwen3", "qwen3", /*seed=*/7);
  return dir;
}

// Live children of `parent` whose command name is `name` (from /proc).
inline std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    const std::string comm = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && name.rfind(comm, 0) == 0 && state != 'Z') out.push_back(std::stoi(pid));
  }
  return out;
}

// Starts xserv-supervisor serving `model` on the CPU with one small worker (64 MiB of KV, no swap)
// and `extra` flags; the router's HTTP port is supervisor.port() afterwards.
inline bool StartSmallStack(ChildProcess& supervisor, const std::string& model,
                            std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model", model, "--worker-base-port",
                                   std::to_string(FreePortRun(8)),  // room for a few ranks
                                   "--worker-arg=--kv-cache-memory", "--worker-arg=0.0625",
                                   "--worker-arg=--swap-space-gb", "--worker-arg=0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return supervisor.StartServer("xserv-supervisor", args, std::chrono::seconds(90));
}

// StartSmallStack with the router's public gRPC API on a free port, stored in *grpc_port.
inline bool StartSmallStackWithGrpc(ChildProcess& supervisor, const std::string& model,
                                    int* grpc_port) {
  const std::string port_file = MakeTempDir() + "/grpc-port";
  if (!StartSmallStack(supervisor, model,
                       {"--grpc-port", "0", "--router-arg=--grpc-port-file",
                        "--router-arg=" + port_file})) {
    return false;
  }
  *grpc_port = 0;
  std::ifstream(port_file) >> *grpc_port;  // written before the HTTP port file
  return *grpc_port > 0;
}

}  // namespace xserv::testing
