// xserv-perplexity: perplexity of a text file under a model served by any OpenAI-compatible server
// (ours, vLLM, llama.cpp's server): the text is tokenized by the server's /tokenize, then scored in
// sliding windows (tools/perplexity/perplexity.h) through /v1/completions with echo and prompt
// logprobs. Prints one JSON object.
//
//   xserv-perplexity --file moby-dick.txt [--url http://127.0.0.1:8080] [--max-length 1024]
//                    [--stride 512] [--max-tokens N] [--api-key KEY] [--model NAME]
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "tools/common/http_client.h"
#include "tools/perplexity/perplexity.h"

namespace {

using Json = nlohmann::json;

struct Flags {
  std::string url = "http://127.0.0.1:8080";
  std::string file, api_key, model;
  int64_t max_length = 1024, stride = 512, max_tokens = 0;
  int timeout_s = 600;
};

// POSTs and parses a JSON reply; an HTTP error becomes a Status carrying the server's message.
absl::StatusOr<Json> Call(const Flags& f, const xserv::tools::HttpEndpoint& endpoint,
                          const std::string& path, const Json& body) {
  auto response = xserv::tools::PostJson(endpoint, path, body.dump(), f.api_key,
                                         std::chrono::seconds(f.timeout_s));
  if (!response.ok()) return response.status();
  Json reply = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (response->status != 200 || reply.is_discarded()) {
    return absl::UnavailableError(path + " answered " + std::to_string(response->status) + ": " +
                                  response->body.substr(0, 500));
  }
  return reply;
}

absl::StatusOr<Json> Run(const Flags& f) {
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + f.file);
  std::stringstream text;
  text << in.rdbuf();
  auto endpoint = xserv::tools::HttpEndpoint::Parse(f.url);
  if (!endpoint.ok()) return endpoint.status();
  Json tokenize = {{"prompt", text.str()}};
  if (!f.model.empty()) tokenize["model"] = f.model;
  auto tokenized = Call(f, *endpoint, "/tokenize", tokenize);
  if (!tokenized.ok()) return tokenized.status();
  std::vector<int64_t> ids = (*tokenized)["tokens"].get<std::vector<int64_t>>();
  if (f.max_tokens > 0 && static_cast<int64_t>(ids.size()) > f.max_tokens) ids.resize(f.max_tokens);
  if (ids.size() < 2) return absl::InvalidArgumentError("the text has fewer than 2 tokens");
  auto windows = xserv::tools::SlidingWindows(static_cast<int64_t>(ids.size()), f.max_length,
                                              f.stride);
  if (!windows.ok()) return windows.status();

  const auto start = std::chrono::steady_clock::now();
  xserv::tools::PerplexityResult result;
  for (size_t i = 0; i < windows->size(); ++i) {
    const xserv::tools::ScoreWindow& w = (*windows)[i];
    Json request = {{"prompt", std::vector<int64_t>(ids.begin() + w.begin, ids.begin() + w.end)},
                    {"max_tokens", 1},
                    {"echo", true},
                    {"logprobs", 0},
                    {"temperature", 0}};
    if (!f.model.empty()) request["model"] = f.model;
    auto reply = Call(f, *endpoint, "/v1/completions", request);
    if (!reply.ok()) return reply.status();
    const Json& lps = (*reply)["choices"][0]["logprobs"]["token_logprobs"];
    std::vector<double> logprobs;
    for (int64_t k = 0; k < w.end - w.begin && k < static_cast<int64_t>(lps.size()); ++k) {
      logprobs.push_back(lps[k].is_number() ? lps[k].get<double>() : std::nan(""));
    }
    if (absl::Status added = xserv::tools::AddWindow(w, logprobs, result); !added.ok()) {
      return added;
    }
    spdlog::info("window {}/{}: tokens [{}, {}), running perplexity {:.4f}", i + 1,
                 windows->size(), w.begin, w.end, result.perplexity());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Json{{"perplexity", result.perplexity()},
              {"mean_nll", result.mean_nll()},
              {"tokens", ids.size()},
              {"tokens_scored", result.tokens_scored},
              {"windows", windows->size()},
              {"max_length", f.max_length},
              {"stride", f.stride},
              {"seconds", seconds},
              {"url", f.url},
              {"file", f.file}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Perplexity of a text file through an OpenAI-compatible server"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  Flags f;
  app.add_option("--file", f.file, "UTF-8 text to score")->required();
  app.add_option("--url", f.url, "server base URL")->capture_default_str();
  app.add_option("--max-length", f.max_length, "tokens per window")->capture_default_str();
  app.add_option("--stride", f.stride, "window advance (<= max-length)")->capture_default_str();
  app.add_option("--max-tokens", f.max_tokens, "score only the first N tokens (0: all)")
      ->capture_default_str();
  app.add_option("--api-key", f.api_key, "bearer key for the server");
  app.add_option("--model", f.model, "model name to send (servers with several)");
  app.add_option("--timeout-s", f.timeout_s, "per request")->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-perplexity")) {
    return *code;
  }
  absl::StatusOr<Json> result = Run(f);
  if (!result.ok()) {
    spdlog::error("{}", result.status().ToString());
    return 1;
  }
  std::cout << result->dump() << std::endl;
  return 0;
}
