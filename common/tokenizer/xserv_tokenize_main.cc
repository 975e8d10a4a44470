// xserv-tokenize: tokenizer as a filter, one JSON object per line on stdin and stdout.
//
//   xserv-tokenize --tokenizer DIR            {"text": "..."}  -> {"ids": [...]}
//   xserv-tokenize --tokenizer DIR --decode   {"ids": [...], "skip_special_tokens": true}
//                                                               -> {"text": "..."}
//   xserv-tokenize --tokenizer DIR            {"messages": [...], "add_generation_prompt": true,
//                                              "chat_template_kwargs": {...}, "tools": [...]}
//                                                               -> {"prompt": "...", "ids": [...]}
// Chat lines render the directory's chat template (chat_template.jinja or tokenizer_config.json)
// exactly as transformers' apply_chat_template, then tokenise the prompt. A malformed line gets
// {"error": "..."} and the tool goes on with the next line.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <iostream>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "common/chat_template/chat_template.h"
#include "common/flags.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace {

// Ordered: key order of tool schemas is visible to chat templates.
using Json = nlohmann::ordered_json;
using xserv::tokenizer::Tokenizer;

Json Error(const std::string& message) { return Json{{"error", message}}; }

Json EncodeLine(const Tokenizer& tokenizer, const Json& request) {
  auto text = request.find("text");
  if (text == request.end() || !text->is_string()) return Error("expected a string field \"text\"");
  return Json{{"ids", tokenizer.Encode(text->get_ref<const std::string&>())}};
}

Json DecodeLine(const Tokenizer& tokenizer, const Json& request) {
  auto ids_json = request.find("ids");
  if (ids_json == request.end() || !ids_json->is_array()) {
    return Error("expected an array field \"ids\"");
  }
  std::vector<uint32_t> ids;
  ids.reserve(ids_json->size());
  for (const Json& id : *ids_json) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return Error("\"ids\" must hold non-negative 32-bit integers");
    }
    ids.push_back(id.get<uint32_t>());
  }
  bool skip_special_tokens = false;
  if (auto skip = request.find("skip_special_tokens"); skip != request.end()) {
    if (!skip->is_boolean()) return Error("\"skip_special_tokens\" must be a boolean");
    skip_special_tokens = skip->get<bool>();
  }
  return Json{{"text", tokenizer.Decode(ids, skip_special_tokens)}};
}

Json ChatLine(const Tokenizer& tokenizer, const xserv::chat_template::ChatTemplate* chat,
              const Json& request) {
  if (chat == nullptr) return Error("no chat template found next to the tokenizer");
  xserv::chat_template::ChatRenderRequest render;
  render.messages = request.at("messages");
  if (!render.messages.is_array()) return Error("\"messages\" must be an array");
  if (auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    render.tools = *tools;
  }
  if (auto gen = request.find("add_generation_prompt"); gen != request.end()) {
    if (!gen->is_boolean()) return Error("\"add_generation_prompt\" must be a boolean");
    render.add_generation_prompt = gen->get<bool>();
  }
  if (auto kwargs = request.find("chat_template_kwargs"); kwargs != request.end()) {
    if (!kwargs->is_object()) return Error("\"chat_template_kwargs\" must be an object");
    render.kwargs = *kwargs;
  }
  auto prompt = chat->Render(render);
  if (!prompt.ok()) return Error(std::string(prompt.status().message()));
  return Json{{"prompt", *prompt}, {"ids", tokenizer.Encode(*prompt)}};
}

Json HandleLine(const Tokenizer& tokenizer, const xserv::chat_template::ChatTemplate* chat,
                const std::string& line, bool decode) {
  const Json request = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return Error("line is not valid JSON");
  if (!request.is_object()) return Error("line must be a JSON object");
  if (request.contains("messages")) return ChatLine(tokenizer, chat, request);
  return decode ? DecodeLine(tokenizer, request) : EncodeLine(tokenizer, request);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenize (or detokenize) JSON lines from stdin with a HuggingFace tokenizer.json"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  std::string tokenizer_path;
  bool decode = false;
  app.add_option("--tokenizer", tokenizer_path, "directory holding tokenizer.json (or the file)")
      ->required();
  app.add_flag("--decode", decode, "read {\"ids\": [...]} lines and write {\"text\": ...}");
  if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-tokenize")) {
    return *exit_code;
  }

  auto tokenizer = Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    spdlog::error("{}", tokenizer.status().ToString());
    return 1;
  }
  // The chat template is optional: without one, only {"messages": ...} lines fail.
  std::optional<xserv::chat_template::ChatTemplate> chat;
  if (std::filesystem::is_directory(tokenizer_path)) {
    auto loaded = xserv::chat_template::ChatTemplate::FromModelDir(tokenizer_path);
    if (loaded.ok()) chat = std::move(*loaded);
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line == "\r") continue;
    const Json reply = HandleLine(**tokenizer, chat ? &*chat : nullptr, line, decode);
    // Replacement keeps the output valid JSON even if a string were not UTF-8.
    std::string out = reply.dump(-1, ' ', false, Json::error_handler_t::replace);
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  return 0;
}
