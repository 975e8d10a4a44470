// OutputPipeline: one request choice's generated ids -> OpenAI-style text deltas.
//
//   ids -> IncrementalDecoder -> ReasoningParser -> reasoning / tool-call deltas
//                                                -> content -> StopStringMatcher -> content deltas
//
// Stop strings apply to content only (as in vLLM with a reasoning parser). Marker ids of the
// reasoning parser bypass the detokenizer (see reasoning_parser.h), so control tokens never show
// in any stream whatever skip_special_tokens says; other special tokens (e.g. <|im_end|>) appear
// in content only when skip_special_tokens is false. Every emitted string is valid UTF-8.
//
// After a stop string completes, the id that completed it is the last one consumed: the caller
// should cancel the generation, report finish_reason "stop" (vLLM's stop_reason = the string), and
// count num_tokens() completion tokens. Otherwise call Finish() when the worker's stream ends
// (EOS, length, abort) to release held-back text.
//
// Ownership and threading: borrows the Tokenizer (it must outlive the pipeline). One pipeline
// per request choice (n > 1 -> n pipelines), used by one thread at a time; movable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "router/output/reasoning_parser.h"
#include "router/output/stop_string_matcher.h"

namespace xserv::router::output {

struct OutputPipelineParams {
  // OpenAI/vLLM default: special tokens' text is not emitted.
  bool skip_special_tokens = true;
  StopStringOptions stop = {};
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  ReasoningParserOptions reasoning = {};
  // Ids the worker ends a generation on (the request's stop_token_ids, and EOS unless
  // ignore_eos): such an id is consumed and counted but its text is left out, unless
  // stop.include_stop_str_in_output, as vLLM's detokenizer does for a stop-terminated request.
  // The worker stops on the first of them it samples and bans them below min_tokens, so one can
  // only be a generation's last id; the pipeline does not check that. The reasoning parser's
  // markers are fed as always (they never show as text).
  std::vector<uint32_t> final_token_ids = {};
  // vLLM's min_tokens: stop strings are looked for only from this many generated ids on (text
  // before is emitted as it comes, so a stop string that starts earlier is not matched).
  size_t min_tokens = 0;

  // InvalidArgument for bad stop strings (see StopStringOptions::Validate).
  absl::Status Validate() const { return stop.Validate(); }
};

// What one Step or Finish produced. Strings may be empty; a step can yield nothing visible
// (held-back text, an incomplete character, a control token).
struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  // Ids consumed by this call, in order: all of them, or up to and including the id that
  // completed a stop string (later ids are ignored).
  std::vector<uint32_t> token_ids;
  // Set on the call where a stop string completed: its index in params.stop.stop, and the string.
  std::optional<size_t> stop_index;
  std::string stop_string;
  // True from the call that matched a stop string or Finish on; later calls return nothing.
  bool finished = false;

  bool has_text() const { return !reasoning.empty() || !content.empty() || !tool_calls.empty(); }
};

// A whole tool call, assembled from ToolCallDeltas.
struct ToolCall {
  std::string name = {};
  std::string arguments = {};  // JSON text as generated (not validated)
};

// Accumulates deltas into the full message (non-streaming responses, n > 1 bookkeeping).
struct OutputText {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  std::vector<uint32_t> token_ids;
  std::optional<size_t> stop_index;
  std::string stop_string;
  bool finished = false;

  void Append(const OutputDelta& delta);
};

class OutputPipeline {
 public:
  // Validates `params` and resolves the reasoning parser's markers.
  static absl::StatusOr<OutputPipeline> Create(const tokenizer::Tokenizer& tokenizer,
                                               OutputPipelineParams params);

  OutputPipeline(OutputPipeline&&) = default;
  OutputPipeline& operator=(OutputPipeline&&) = delete;

  // Consumes generated ids in order (any chunking gives the same concatenated output).
  OutputDelta Step(std::span<const uint32_t> ids);
  OutputDelta Step(uint32_t id) { return Step(std::span<const uint32_t>(&id, 1)); }
  // Ends the stream: flushes the detokenizer, the parser and held-back stop-string text.
  OutputDelta Finish();

  bool finished() const { return finished_; }
  // Ids consumed so far (completion tokens).
  size_t num_tokens() const { return num_tokens_; }
  const OutputPipelineParams& params() const { return params_; }

 private:
  OutputPipeline(const tokenizer::Tokenizer& tokenizer, OutputPipelineParams params,
                 std::unique_ptr<ReasoningParser> parser, StopStringMatcher matcher);
  // Moves `parsed` into `out`, passing content through the stop matcher.
  void Emit(ParsedDelta& parsed, OutputDelta* out);

  OutputPipelineParams params_;
  tokenizer::IncrementalDecoder decoder_;
  std::unique_ptr<ReasoningParser> parser_;
  StopStringMatcher matcher_;
  size_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace xserv::router::output
