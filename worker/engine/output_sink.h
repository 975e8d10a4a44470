// OutputSink: where the engine delivers one request's results. Implemented by the gRPC stream
// reactor (worker/service) and by tests.
//
// Called only from the engine-loop thread, in order: any number of OnTokens, then exactly one
// OnFinished. Implementations must not block (queue and return); the engine keeps the sink alive
// until OnFinished returns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/request.h"
#include "worker/sampling/sampler.h"

namespace xserv::engine {

struct TokenOutput {
  int32_t token = 0;
  std::optional<sampling::PositionLogprobs> logprobs;  // when the request asked for them
};

struct FinishInfo {
  FinishReason reason = FinishReason::kStop;
  std::optional<int32_t> stop_token;  // the EOS / stop id that ended a kStop request
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  std::string message;            // detail for kAbort / kError
  double queue_time_s = 0;        // arrival -> first scheduled
  double time_to_first_token_s = 0;
};

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // New tokens in order. `prompt_logprobs` is non-empty at most once, with the first tokens:
  // entry i describes prompt token i + 1.
  virtual void OnTokens(std::vector<TokenOutput> tokens,
                        std::vector<sampling::PositionLogprobs> prompt_logprobs) = 0;
  virtual void OnFinished(const FinishInfo& info) = 0;
};

}  // namespace xserv::engine
