// xserv-tokenizer-bench: single-thread encode (and decode) throughput of a tokenizer on a text
// file. The file is encoded line by line (as a server would see prompts) and as one string, a
// few times each; the best run is reported in MB/s of UTF-8 input.
//
//   xserv-tokenizer-bench --tokenizer .assets/tokenizers/qwen3 --text .assets/text/moby-dick.txt
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using xserv::tokenizer::Tokenizer;

template <typename Fn>
double BestSeconds(int repeats, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

std::vector<std::string> SplitParagraphs(const std::string& text) {
  // Blank-line separated paragraphs: prompt-sized inputs that keep newlines inside.
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    end = end == std::string::npos ? text.size() : end + 2;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Single-thread tokenizer throughput"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  std::string tokenizer_path, text_path;
  int repeats = 5;
  app.add_option("--tokenizer", tokenizer_path, "directory holding tokenizer.json")->required();
  app.add_option("--text", text_path, "UTF-8 text file")->required();
  app.add_option("--repeats", repeats, "runs per measurement; the best is reported")
      ->capture_default_str();
  if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-tokenizer-bench")) {
    return *exit_code;
  }

  const auto load_start = Clock::now();
  auto tokenizer = Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    spdlog::error("{}", tokenizer.status().ToString());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    spdlog::error("cannot open {}", text_path);
    return 1;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::vector<std::string> paragraphs = SplitParagraphs(text);
  const double mb = static_cast<double>(text.size()) / 1e6;
  const Tokenizer& tok = **tokenizer;

  // The first pass runs on an empty word cache; later passes see it warm, as a long-running
  // server's would be.
  std::vector<uint32_t> ids;
  const double cold_s = BestSeconds(1, [&] { ids = tok.Encode(text); });
  const double whole_s = BestSeconds(repeats, [&] { ids = tok.Encode(text); });
  std::vector<uint32_t> scratch;
  const double para_s = BestSeconds(repeats, [&] {
    for (const std::string& p : paragraphs) {
      scratch.clear();
      tok.EncodeAppend(p, &scratch);
    }
  });
  std::string decoded;
  const double decode_s = BestSeconds(repeats, [&] { decoded = tok.Decode(ids); });
  size_t streamed = 0;
  const double stream_s = BestSeconds(repeats, [&] {
    xserv::tokenizer::IncrementalDecoder dec(tok, false);
    streamed = 0;
    for (uint32_t id : ids) streamed += dec.Step(id).size();
    streamed += dec.Flush().size();
  });

  std::printf("tokenizer: %s (load %.2f s)\n", tokenizer_path.c_str(), load_s);
  std::printf("text: %s, %.2f MB, %zu tokens, %zu paragraphs\n", text_path.c_str(), mb,
              ids.size(), paragraphs.size());
  std::printf("encode, cold cache   : %8.2f MB/s\n", mb / cold_s);
  std::printf("encode whole text    : %8.2f MB/s\n", mb / whole_s);
  std::printf("encode per paragraph : %8.2f MB/s\n", mb / para_s);
  std::printf("decode               : %8.2f MB/s (round trip %s)\n", mb / decode_s,
              decoded == text ? "exact" : "differs");
  std::printf("incremental decode   : %8.2f Mtok/s (%s)\n",
              static_cast<double>(ids.size()) / stream_s / 1e6,
              streamed == decoded.size() ? "same length" : "length differs");
  return 0;
}
