// Engine::Live, the engine loop's per-request state, shared by engine.cc (requests in and out,
// the loop) and engine_step.cc (planning, running, sampling and applying steps). Loop thread
// only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "worker/engine/engine.h"
#include "worker/sampling/sampler.h"

namespace xserv::engine {

struct Engine::Live {
  GenerateParams params;
  uint64_t seed = 0;
  Time arrival{};
  std::optional<Time> first_scheduled;
  std::optional<Time> first_token;
  int32_t cached_tokens = 0;
  std::vector<sampling::PositionLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  std::optional<int32_t> stop_token;
  std::vector<int32_t> banned;  // EOS + stop ids, enforced while below min_tokens

  bool WantsPromptLogprobs() const {
    return params.sampling.prompt_logprobs >= 0 && !prompt_logprobs_sent &&
           prompt_logprobs.size() + 1 < params.prompt.size();
  }
};

}  // namespace xserv::engine
