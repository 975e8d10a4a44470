#include "router/output/output_pipeline.h"

#include <algorithm>
#include <utility>

namespace xserv::router::output {
namespace {

// Appends `delta` to `out`, merging a fragment into the previous one of the same call.
void AppendToolCallDelta(ToolCallDelta delta, std::vector<ToolCallDelta>* out) {
  if (!out->empty() && out->back().index == delta.index && delta.name.empty()) {
    out->back().arguments.append(delta.arguments);
    return;
  }
  out->push_back(std::move(delta));
}

}  // namespace

void OutputText::Append(const OutputDelta& delta) {
  reasoning.append(delta.reasoning);
  content.append(delta.content);
  for (const ToolCallDelta& call : delta.tool_calls) {
    while (tool_calls.size() <= static_cast<size_t>(call.index)) tool_calls.emplace_back();
    ToolCall& whole = tool_calls[static_cast<size_t>(call.index)];
    if (!call.name.empty()) whole.name = call.name;
    whole.arguments.append(call.arguments);
  }
  token_ids.insert(token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
  if (delta.stop_index.has_value()) {
    stop_index = delta.stop_index;
    stop_string = delta.stop_string;
  }
  finished = finished || delta.finished;
}

absl::StatusOr<OutputPipeline> OutputPipeline::Create(const tokenizer::Tokenizer& tokenizer,
                                                      OutputPipelineParams params) {
  absl::Status status = params.Validate();
  if (!status.ok()) return status;
  absl::StatusOr<std::unique_ptr<ReasoningParser>> parser =
      MakeReasoningParser(params.reasoning_format, tokenizer, params.reasoning);
  if (!parser.ok()) return parser.status();
  absl::StatusOr<StopStringMatcher> matcher = StopStringMatcher::Create(params.stop);
  if (!matcher.ok()) return matcher.status();
  return OutputPipeline(tokenizer, std::move(params), std::move(*parser), std::move(*matcher));
}

OutputPipeline::OutputPipeline(const tokenizer::Tokenizer& tokenizer, OutputPipelineParams params,
                               std::unique_ptr<ReasoningParser> parser, StopStringMatcher matcher)
    : params_(std::move(params)),
      decoder_(tokenizer, params_.skip_special_tokens),
      parser_(std::move(parser)),
      matcher_(std::move(matcher)) {}

void OutputPipeline::Emit(ParsedDelta& parsed, OutputDelta* out) {
  out->reasoning.append(parsed.reasoning);
  for (ToolCallDelta& call : parsed.tool_calls) {
    AppendToolCallDelta(std::move(call), &out->tool_calls);
  }
  if (parsed.content.empty()) return;
  if (num_tokens_ < params_.min_tokens) {
    out->content.append(parsed.content);
    return;
  }
  StopStringMatcher::FeedResult fed = matcher_.Feed(parsed.content);
  out->content.append(fed.text);
  if (fed.stop_index.has_value()) {
    out->stop_index = fed.stop_index;
    out->stop_string = matcher_.stop_string(*fed.stop_index);
    finished_ = true;
  }
}

OutputDelta OutputPipeline::Step(std::span<const uint32_t> ids) {
  OutputDelta out;
  for (uint32_t id : ids) {
    if (finished_) break;
    out.token_ids.push_back(id);
    ++num_tokens_;
    if (!params_.stop.include_stop_str_in_output && !parser_->IsMarker(id) &&
        std::find(params_.final_token_ids.begin(), params_.final_token_ids.end(), id) !=
            params_.final_token_ids.end()) {
      continue;  // the generation's last id: its text stays out
    }
    ParsedDelta parsed;
    if (parser_->IsMarker(id)) {
      // A marker ends any pending partial character, exactly as decoding it would.
      parser_->Feed(id, decoder_.Flush(), &parsed);
    } else {
      parser_->Feed(id, decoder_.Step(id), &parsed);
    }
    Emit(parsed, &out);
  }
  out.finished = finished_;
  return out;
}

OutputDelta OutputPipeline::Finish() {
  OutputDelta out;
  if (!finished_) {
    ParsedDelta parsed;
    parser_->Finish(decoder_.Flush(), &parsed);
    Emit(parsed, &out);
    if (!finished_) out.content.append(matcher_.Flush());
    finished_ = true;
  }
  out.finished = true;
  return out;
}

}  // namespace xserv::router::output
