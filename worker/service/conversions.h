// Mapping between the internal gRPC messages (xserv.worker.v1) and the engine's types: proto
// `optional` sampling fields onto SamplingParams defaults, engine outputs onto stream messages.
// Pure functions.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/engine/output_sink.h"
#include "xserv/worker/v1/worker.pb.h"

namespace xserv::worker {

// Fills everything but the sink. InvalidArgument for values that cannot be represented (e.g. a
// token id above int32); range checks are the engine's (Engine::Submit).
absl::StatusOr<engine::GenerateParams> ToGenerateParams(
    const xserv::worker::v1::GenerateRequest& request);

void AppendTokens(const std::vector<engine::TokenOutput>& tokens,
                  xserv::worker::v1::TokenDelta& delta);
void AppendPromptLogprobs(const std::vector<sampling::PositionLogprobs>& logprobs,
                          xserv::worker::v1::TokenDelta& delta);
xserv::worker::v1::Finished ToFinished(const engine::FinishInfo& info);

}  // namespace xserv::worker
