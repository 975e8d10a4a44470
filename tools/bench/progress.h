// The progress line of xserv-bench on stderr. On a terminal, a bar redrawn in place as requests
// finish; elsewhere (CI logs), a plain line at most every `plain_every_s` seconds and at the end.
// Add() is thread-safe (client threads call it); Finish() is called once, after the last Add().
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace xserv::tools {

// "label [#####.....]  12/64  3.2 s" with a bar of `width` cells. Pure.
std::string RenderProgress(const std::string& label, int done, int total, double elapsed_s,
                           int width = 30);

class Progress {
 public:
  Progress(std::string label, int total, std::FILE* out, bool terminal, double plain_every_s = 10);

  void Add();
  void Finish();

 private:
  void Draw(bool final);  // mu_ held

  const std::string label_;
  const int total_;
  std::FILE* const out_;
  const bool terminal_;
  const double plain_every_s_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  int done_ = 0;
  double last_plain_s_ = 0;
};

}  // namespace xserv::tools
