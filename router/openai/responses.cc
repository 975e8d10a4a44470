#include "router/openai/responses.h"

#include "router/output/token_text.h"

namespace xserv::router {
namespace {

namespace wv1 = xserv::worker::v1;

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Json Bytes(const std::string& raw) {
  Json out = Json::array();
  for (unsigned char c : raw) out.push_back(static_cast<int>(c));
  return out;
}

Json ChatLogprobEntry(const wv1::PositionLogprobs& p, const TokenRenderer& tok) {
  Json entry = {{"token", tok.Text(p.token_id())},
                {"logprob", p.logprob()},
                {"bytes", Bytes(tok.Bytes(p.token_id()))}};
  Json top = Json::array();
  for (const wv1::TokenLogprob& alt : p.top()) {
    top.push_back({{"token", tok.Text(alt.token_id())},
                   {"logprob", alt.logprob()},
                   {"bytes", Bytes(tok.Bytes(alt.token_id()))}});
  }
  entry["top_logprobs"] = std::move(top);
  return entry;
}

Json ChatLogprobs(const std::vector<wv1::PositionLogprobs>& lps, const TokenRenderer& tok) {
  Json content = Json::array();
  for (const auto& p : lps) content.push_back(ChatLogprobEntry(p, tok));
  return Json{{"content", std::move(content)}};
}

// Characters (code points) of UTF-8 text: what text_offset counts, as Python's len() in vLLM.
size_t CodePoints(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// Legacy completions logprobs over (optional echoed prompt) + generated tokens.
// text_offset: where the first token's text starts, in characters; left past the last token's.
Json CompletionLogprobs(const std::vector<uint32_t>* prompt_ids,
                        const std::vector<wv1::PositionLogprobs>& prompt_lps,
                        const std::vector<wv1::PositionLogprobs>& lps,
                        const TokenRenderer& tok, size_t& text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  size_t& offset = text_offset;
  auto add = [&](uint32_t id, std::optional<float> lp, const wv1::PositionLogprobs* p) {
    const std::string text = tok.Text(id);
    tokens.push_back(text);
    token_logprobs.push_back(lp ? Json(*lp) : Json(nullptr));
    if (p == nullptr) {
      top.push_back(nullptr);
    } else {
      Json alts = Json::object();
      for (const wv1::TokenLogprob& alt : p->top()) {
        alts[tok.Text(alt.token_id())] = alt.logprob();
      }
      top.push_back(std::move(alts));
    }
    offsets.push_back(offset);
    offset += CodePoints(text);
  };
  if (prompt_ids != nullptr) {
    for (size_t i = 0; i < prompt_ids->size(); ++i) {
      // The first prompt token has no logprob; entry i-1 describes prompt token i.
      const wv1::PositionLogprobs* p =
          i > 0 && i - 1 < prompt_lps.size() ? &prompt_lps[i - 1] : nullptr;
      add((*prompt_ids)[i], p ? std::optional<float>(p->logprob()) : std::nullopt, p);
    }
  }
  for (const auto& p : lps) add(p.token_id(), p.logprob(), &p);
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

Json ToolCallsJson(const std::vector<output::ToolCall>& calls, const std::string& id_prefix) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back({{"id", id_prefix + std::to_string(i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  }
  return out;
}

Json StopReasonJson(const std::optional<StopReason>& r) {
  if (!r) return nullptr;
  if (const auto* id = std::get_if<uint32_t>(&*r)) return *id;
  return std::get<std::string>(*r);
}

}  // namespace

std::string TokenRenderer::Text(uint32_t id) const {
  if (as_token_ids) return "token_id:" + std::to_string(id);
  return output::RenderTokenText(*tokenizer, id).text;
}

std::string TokenRenderer::Bytes(uint32_t id) const {
  if (as_token_ids) return "";
  return output::RenderTokenText(*tokenizer, id).bytes;
}

Json UsageJson(const UsageCounts& u) {
  Json usage = {{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.cached_tokens > 0) usage["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return usage;
}

std::string ChatCompletionBody(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                               const UsageCounts& usage, bool with_logprobs,
                               const TokenRenderer& tokens) {
  Json out_choices = Json::array();
  for (const ChoiceResult& c : choices) {
    Json message = {{"role", "assistant"}};
    message["content"] =
        c.text.content.empty() && !c.text.tool_calls.empty() ? Json(nullptr) : Json(c.text.content);
    if (!c.text.reasoning.empty()) message["reasoning_content"] = c.text.reasoning;
    if (!c.text.tool_calls.empty()) {
      message["tool_calls"] = ToolCallsJson(c.text.tool_calls, meta.id + "-call-");
    }
    Json choice = {{"index", c.index}, {"message", std::move(message)}};
    choice["logprobs"] = with_logprobs ? ChatLogprobs(c.logprobs, tokens) : Json(nullptr);
    choice["finish_reason"] = c.finish_reason;
    choice["stop_reason"] = StopReasonJson(c.stop_reason);
    out_choices.push_back(std::move(choice));
  }
  return Dump(Json{{"id", meta.id},
                   {"object", "chat.completion"},
                   {"created", meta.created},
                   {"model", meta.model},
                   {"choices", std::move(out_choices)},
                   {"usage", UsageJson(usage)}});
}

std::string CompletionBody(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                           const UsageCounts& usage, bool with_logprobs,
                           const TokenRenderer& tokens) {
  Json out_choices = Json::array();
  for (const ChoiceResult& c : choices) {
    const bool echo = c.prompt_ids != nullptr;
    Json choice = {{"index", c.index}, {"text", (echo ? c.prompt_text : "") + c.text.content}};
    size_t text_offset = 0;
    choice["logprobs"] = with_logprobs ? CompletionLogprobs(c.prompt_ids, c.prompt_logprobs,
                                                            c.logprobs, tokens, text_offset)
                                       : Json(nullptr);
    choice["finish_reason"] = c.finish_reason;
    choice["stop_reason"] = StopReasonJson(c.stop_reason);
    out_choices.push_back(std::move(choice));
  }
  return Dump(Json{{"id", meta.id},
                   {"object", "text_completion"},
                   {"created", meta.created},
                   {"model", meta.model},
                   {"choices", std::move(out_choices)},
                   {"usage", UsageJson(usage)}});
}

std::string ChatChunkBody(const ResponseMeta& meta, const ChatChunk& chunk, bool with_logprobs,
                          const TokenRenderer& tokens) {
  Json delta = Json::object();
  if (chunk.role) {
    delta["role"] = "assistant";
    delta["content"] = "";
  }
  if (!chunk.reasoning.empty()) delta["reasoning_content"] = chunk.reasoning;
  if (!chunk.content.empty()) delta["content"] = chunk.content;
  if (!chunk.tool_calls.empty()) {
    Json calls = Json::array();
    for (const output::ToolCallDelta& t : chunk.tool_calls) {
      Json call = {{"index", t.index}};
      if (!t.name.empty()) {
        call["id"] = meta.id + "-call-" + std::to_string(t.index);
        call["type"] = "function";
        call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
      } else {
        call["function"] = {{"arguments", t.arguments}};
      }
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  Json choice = {{"index", chunk.index}, {"delta", std::move(delta)}};
  choice["logprobs"] = with_logprobs && !chunk.logprobs.empty()
                           ? ChatLogprobs(chunk.logprobs, tokens)
                           : Json(nullptr);
  choice["finish_reason"] = chunk.finish_reason ? Json(*chunk.finish_reason) : Json(nullptr);
  if (chunk.finish_reason) choice["stop_reason"] = StopReasonJson(chunk.stop_reason);
  return Dump(Json{{"id", meta.id},
                   {"object", "chat.completion.chunk"},
                   {"created", meta.created},
                   {"model", meta.model},
                   {"choices", Json::array({std::move(choice)})}});
}

std::string CompletionChunkBody(const ResponseMeta& meta, const CompletionChunk& chunk,
                                bool with_logprobs, const TokenRenderer& tokens,
                                size_t& text_offset) {
  Json choice = {{"index", chunk.index}, {"text", chunk.text}};
  choice["logprobs"] = with_logprobs && (!chunk.logprobs.empty() || chunk.prompt_ids != nullptr)
                           ? CompletionLogprobs(chunk.prompt_ids, chunk.prompt_logprobs,
                                                chunk.logprobs, tokens, text_offset)
                           : Json(nullptr);
  choice["finish_reason"] = chunk.finish_reason ? Json(*chunk.finish_reason) : Json(nullptr);
  if (chunk.finish_reason) choice["stop_reason"] = StopReasonJson(chunk.stop_reason);
  return Dump(Json{{"id", meta.id},
                   {"object", "text_completion"},
                   {"created", meta.created},
                   {"model", meta.model},
                   {"choices", Json::array({std::move(choice)})}});
}

std::string UsageChunkBody(const ResponseMeta& meta, const std::string& object,
                           const UsageCounts& usage) {
  return Dump(Json{{"id", meta.id},
                   {"object", object},
                   {"created", meta.created},
                   {"model", meta.model},
                   {"choices", Json::array()},
                   {"usage", UsageJson(usage)}});
}

}  // namespace xserv::router
