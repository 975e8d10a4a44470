// Where xserv-bench sends its requests: an OpenAI-compatible HTTP server (streaming
// /v1/completions) or xserv's public gRPC API (xserv.v1.Generation/Generate). A target is made
// once in main() and then used by many client threads at once: Send and CountTokens are
// thread-safe and never throw.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/workload.h"

namespace xserv::tools {

struct TargetOptions {
  std::string url;      // http://host:port[/path] (openai) or [grpc://]host:port (grpc)
  std::string api_key;  // bearer key, "" for none
  std::string model;    // model name to send, "" for the server's default
  bool ignore_eos = true;  // ask for exactly max_tokens (vLLM's ignore_eos)
  std::chrono::seconds timeout{600};
};

class BenchTarget {
 public:
  virtual ~BenchTarget() = default;
  // Sends one streaming request and times it; failures come back as timing.ok == false.
  virtual RequestTiming Send(const BenchPrompt& prompt) = 0;
  // The number of tokens the server makes of `text` (calibrates text prompts).
  virtual absl::StatusOr<int> CountTokens(const std::string& text) = 0;
};

absl::StatusOr<std::unique_ptr<BenchTarget>> MakeOpenAiTarget(const TargetOptions& options);
absl::StatusOr<std::unique_ptr<BenchTarget>> MakeGrpcTarget(const TargetOptions& options);

// Times the token events of one streamed request: TTFT at the first, ITL between later ones.
class StreamTimer {
 public:
  using Clock = std::chrono::steady_clock;

  void Event() {
    const auto now = Clock::now();
    if (events_++ == 0) {
      timing_.ttft_s = Seconds(now - start_);
    } else {
      timing_.itl_s.push_back(Seconds(now - last_));
    }
    last_ = now;
  }
  int events() const { return events_; }
  RequestTiming& timing() { return timing_; }
  // Sets e2e and returns the timing; ok only with at least one token event.
  RequestTiming Finish(bool ok) {
    timing_.e2e_s = Seconds(Clock::now() - start_);
    timing_.ok = ok && events_ > 0;
    return std::move(timing_);
  }

 private:
  static double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  RequestTiming timing_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = start_;
  int events_ = 0;
};

}  // namespace xserv::tools
