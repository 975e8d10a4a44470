#include "router/output/stop_string_matcher.h"

#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"

namespace xserv::router::output {

absl::Status StopStringOptions::Validate() const {
  if (stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxStopStrings, " stop strings are allowed, got ", stop.size()));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is an empty string"));
    }
    if (stop[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is longer than ",
                                                     kMaxStopStringBytes, " bytes"));
    }
    if (!tokenizer::IsValidUtf8(stop[i])) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StopStringMatcher> StopStringMatcher::Create(StopStringOptions options) {
  absl::Status status = options.Validate();
  if (!status.ok()) return status;
  StopStringMatcher matcher(std::move(options));
  matcher.Build();
  return matcher;
}

StopStringMatcher::StopStringMatcher(StopStringOptions options) : options_(std::move(options)) {}

int32_t StopStringMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), byte,
                             [](const std::pair<uint8_t, int32_t>& c, uint8_t b) {
                               return c.first < b;
                             });
  return (it != children.end() && it->first == byte) ? it->second : -1;
}

int32_t StopStringMatcher::Next(int32_t node, uint8_t byte) const {
  while (true) {
    const int32_t child = Child(node, byte);
    if (child >= 0) return child;
    if (node == 0) return 0;
    node = nodes_[node].fail;
  }
}

void StopStringMatcher::Build() {
  nodes_.assign(1, Node{});
  // own[n]: index of the stop string spelled by node n, or -1.
  std::vector<int32_t> own(1, -1);
  for (size_t i = 0; i < options_.stop.size(); ++i) {
    int32_t node = 0;
    for (char ch : options_.stop[i]) {
      const uint8_t byte = static_cast<uint8_t>(ch);
      int32_t child = Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        Node fresh;
        fresh.depth = nodes_[node].depth + 1;
        nodes_.push_back(std::move(fresh));
        own.push_back(-1);
        auto& children = nodes_[node].children;
        children.insert(std::upper_bound(children.begin(), children.end(),
                                         std::make_pair(byte, int32_t{-1})),
                        {byte, child});
      }
      node = child;
    }
    if (own[node] < 0) own[node] = static_cast<int32_t>(i);  // duplicates: first one reports
  }
  // Breadth-first: a node's fail link and output only depend on shallower nodes.
  std::deque<int32_t> queue;
  for (const auto& [byte, child] : nodes_[0].children) {
    nodes_[child].fail = 0;
    nodes_[child].output = own[child];
    queue.push_back(child);
  }
  while (!queue.empty()) {
    const int32_t node = queue.front();
    queue.pop_front();
    for (const auto& [byte, child] : nodes_[node].children) {
      nodes_[child].fail = Next(nodes_[node].fail, byte);
      // The node's own string is the longest ending here; otherwise inherit the fail chain's.
      nodes_[child].output = own[child] >= 0 ? own[child] : nodes_[nodes_[child].fail].output;
      queue.push_back(child);
    }
  }
}

StopStringMatcher::FeedResult StopStringMatcher::Feed(std::string_view delta) {
  FeedResult result;
  if (stop_index_.has_value() || flushed_ || delta.empty()) return result;
  if (options_.stop.empty()) {
    result.text.assign(delta);
    return result;
  }
  for (size_t i = 0; i < delta.size(); ++i) {
    state_ = Next(state_, static_cast<uint8_t>(delta[i]));
    const int32_t match = nodes_[state_].output;
    if (match < 0) continue;
    // The match lies within the last nodes_[state_].depth bytes of held_ + delta[0, i].
    const size_t end = held_.size() + i + 1;
    const size_t length = options_.stop[match].size();
    const size_t emit = options_.include_stop_str_in_output ? end : end - length;
    result.text.reserve(emit);
    result.text.append(held_, 0, std::min(emit, held_.size()));
    if (emit > held_.size()) result.text.append(delta.substr(0, emit - held_.size()));
    held_.clear();
    stop_index_ = static_cast<size_t>(match);
    result.stop_index = stop_index_;
    return result;
  }
  // Keep the longest suffix that may still begin a stop string; emit everything before it.
  const size_t keep = nodes_[state_].depth;
  const size_t total = held_.size() + delta.size();
  const size_t emit = total - keep;
  if (emit >= held_.size()) {
    result.text = std::move(held_);
    result.text.append(delta.substr(0, emit - result.text.size()));
    held_.assign(delta.substr(delta.size() - keep));
  } else {
    result.text.assign(held_, 0, emit);
    held_.erase(0, emit);
    held_.append(delta);
  }
  return result;
}

std::string StopStringMatcher::Flush() {
  flushed_ = true;
  state_ = 0;
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace xserv::router::output
