// xserv-router over xserv-fake-worker on loopback: for tests of the router's own behaviour
// (reasoning split, hostile clients, load) where a model would only add time. The router reads
// only the tokenizer, the chat template and config.json's model_type from its model directory,
// so a "model" here is a directory holding just those, made from a real fetched tokenizer.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"

namespace xserv::testing {

// A model directory with tokenizer.json and tokenizer_config.json copied from
// `.assets/tokenizers/<tokenizer>`, a config.json naming `model_type`, and (when given) a
// chat_template.jinja copied from the source path `chat_template`. Empty when the tokenizer was
// not fetched (scripts/fetch-assets.sh).
inline std::string MakeTokenizerOnlyModel(const std::string& tokenizer, const std::string& model_type,
                                          const std::string& chat_template = "") {
  namespace fs = std::filesystem;
  const fs::path source = SourcePath(".assets/tokenizers/" + tokenizer);
  if (!fs::exists(source / "tokenizer.json")) return "";
  const fs::path dir = fs::path(MakeTempDir()) / (tokenizer + "-fake");
  fs::create_directories(dir);
  fs::copy_file(source / "tokenizer.json", dir / "tokenizer.json");
  fs::copy_file(source / "tokenizer_config.json", dir / "tokenizer_config.json");
  if (!chat_template.empty()) {
    fs::copy_file(SourcePath(chat_template), dir / "chat_template.jinja");
  }
  std::ofstream(dir / "config.json") << nlohmann::json{{"model_type", model_type}}.dump();
  return dir.string();
}

// The two processes of one test stack; both are killed when it is destroyed.
struct FakeStack {
  ChildProcess worker;
  ChildProcess router;
  int port() const { return router.port(); }
  std::string Logs() const {
    return "--- fake worker ---\n" + worker.Log() + "--- router ---\n" + router.Log();
  }
};

// Starts xserv-fake-worker with `worker_args`, then xserv-router on `model_dir` in front of it
// with `router_args`. False (with the logs in the test failure) when either did not come up.
inline bool StartFakeStack(FakeStack& stack, const std::string& model_dir,
                           const std::vector<std::string>& worker_args,
                           std::vector<std::string> router_args = {}) {
  if (!stack.worker.StartServer("xserv-fake-worker", worker_args)) {
    ADD_FAILURE() << stack.Logs();
    return false;
  }
  router_args.insert(router_args.begin(),
                     {"--model", model_dir, "--workers", stack.worker.address()});
  if (!stack.router.StartServer("xserv-router", router_args)) {
    ADD_FAILURE() << stack.Logs();
    return false;
  }
  return true;
}

// "1,2,3": the form --script-ids takes.
inline std::string JoinIds(const std::vector<uint32_t>& ids) {
  std::string out;
  for (uint32_t id : ids) {
    if (!out.empty()) out += ',';
    out += std::to_string(id);
  }
  return out;
}

}  // namespace xserv::testing
