// Conversions between the public xserv.v1 messages and the router's OpenAI-side types, so the
// gRPC API shares the HTTP API's validation and defaults instead of re-implementing them:
//
//   xserv.v1.GenerateRequest -> completions JSON body -> ParseCompletionRequest -> Prepare
//
// The proto is rendered as the equivalent /v1/completions body (text or token ids as `prompt`,
// SamplingParams under their OpenAI/vLLM names) and parsed by the very parser HTTP uses, so range
// checks, error messages and the `param` they name are the same. Differences the proto defines
// are applied after parsing: max_tokens defaults to the remaining context (not 16), n is 1, and
// prompt_logprobs is independent of logprobs (no echo).
//
// Pure functions of their inputs; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "router/openai/api_error.h"
#include "router/openai/model_context.h"
#include "router/openai/prepare.h"
#include "router/openai/request.h"
#include "router/openai/responses.h"
#include "xserv/v1/generation.pb.h"
#include "xserv/worker/v1/worker.pb.h"

namespace xserv::router::grpc_api {

// The public request as a validated completion request (kind kCompletion, n = 1), or the error.
ApiResult<GenerationRequest> ToGenerationRequest(const xserv::v1::GenerateRequest& request);

// Prepare() plus what only the public API has: prompt_logprobs without echo. Every problem is an
// ApiError, as from Prepare().
ApiResult<PreparedGeneration> PrepareGenerate(const xserv::v1::GenerateRequest& request,
                                              const ModelContext& model);

// ApiError (HTTP semantics) -> absl::Status, the inverse of ApiError::FromStatus: 400
// InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound, 429
// ResourceExhausted, 503 Unavailable, 504 DeadlineExceeded, other Internal. The message is kept
// (it names the offending field, under its OpenAI name).
absl::Status ApiErrorToStatus(const ApiError& error);

// Worker logprobs -> public logprobs, with each token's text (RenderTokenText).
void AppendLogprobs(const std::vector<xserv::worker::v1::PositionLogprobs>& from,
                    const TokenRenderer& tokens,
                    google::protobuf::RepeatedPtrField<xserv::v1::PositionLogprobs>* to);

// "stop" / "tool_calls" -> STOP, "length" -> LENGTH, "abort" -> ABORT, anything else ERROR.
xserv::v1::FinishReason ToFinishReason(const std::string& reason);

}  // namespace xserv::router::grpc_api
