#include "tools/bench/progress.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace xserv::tools {

std::string RenderProgress(const std::string& label, int done, int total, double elapsed_s,
                           int width) {
  const int filled = total > 0 ? std::clamp(done * width / total, 0, width) : width;
  return absl::StrFormat("%s [%s%s] %*d/%d  %.1f s", label, std::string(filled, '#'),
                         std::string(width - filled, '.'),
                         static_cast<int>(std::to_string(total).size()), done,
                         total, elapsed_s);
}

Progress::Progress(std::string label, int total, std::FILE* out, bool terminal,
                   double plain_every_s)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      terminal_(terminal),
      plain_every_s_(plain_every_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (terminal_) Draw(false);
}

void Progress::Add() {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  Draw(false);
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  Draw(true);
}

void Progress::Draw(bool final) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = RenderProgress(label_, done_, total_, elapsed);
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else if (final || elapsed - last_plain_s_ >= plain_every_s_) {
    last_plain_s_ = elapsed;
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace xserv::tools
