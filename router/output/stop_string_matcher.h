// StopStringMatcher: finds OpenAI `stop` strings in streamed text and decides what may be sent.
//
// Text arrives as deltas (from the incremental detokenizer, through the reasoning parser). Feed
// returns the text that can safely be streamed: every byte that cannot be the start of a stop
// string, whatever comes next. The longest suffix that is still a prefix of some stop string is
// held back, so a partial stop string is never streamed. When a stop string completes (it may
// span any number of deltas), Feed reports which one, returns the text before it (or through it
// with include_stop_str_in_output), and everything afterwards is dropped. Flush releases the
// held-back text at the end of the stream.
//
// Semantics (independent of how the text is chunked): the match is the occurrence that ends
// first in the whole text; among occurrences ending at the same byte, the longest wins.
//
// Cost: an Aho-Corasick automaton over the stop strings' bytes; each byte of output is examined
// once (amortised O(1)), never rescanned. Held-back text is shorter than the longest stop string.
// Input must be valid UTF-8 (as the detokenizer guarantees); stop strings are valid UTF-8, so
// every cut falls on a character boundary and the output is valid UTF-8 too.
//
// Ownership and threading: one matcher per request choice, used by one thread at a time. It owns
// its automaton; copying copies it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xserv::router::output {

struct StopStringOptions {
  // In request order; reported matches index into this list.
  std::vector<std::string> stop = {};
  // OpenAI returns text up to the stop string; vLLM's include_stop_str_in_output keeps it.
  bool include_stop_str_in_output = false;

  static constexpr size_t kMaxStopStrings = 64;
  static constexpr size_t kMaxStopStringBytes = 1024;
  // InvalidArgument for an empty entry, invalid UTF-8, too many or too long entries.
  absl::Status Validate() const;
};

class StopStringMatcher {
 public:
  struct FeedResult {
    std::string text;                   // safe to stream now
    std::optional<size_t> stop_index;   // set once, when a stop string completed
  };

  // Validates `options` and builds the automaton.
  static absl::StatusOr<StopStringMatcher> Create(StopStringOptions options);

  // Consumes `delta`. After a match every later call returns nothing.
  FeedResult Feed(std::string_view delta);
  // Releases the held-back text (empty after a match) and ends the stream.
  std::string Flush();

  bool stopped() const { return stop_index_.has_value(); }
  std::optional<size_t> stop_index() const { return stop_index_; }
  const std::string& stop_string(size_t index) const { return options_.stop[index]; }
  // Bytes currently held back (shorter than the longest stop string).
  size_t held_back_bytes() const { return held_.size(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t fail = 0;     // longest proper suffix that is also a trie node
    int32_t output = -1;  // longest stop string ending here (own or via fail links), or -1
    uint32_t depth = 0;   // bytes from the root
  };

  explicit StopStringMatcher(StopStringOptions options);
  void Build();
  int32_t Child(int32_t node, uint8_t byte) const;
  int32_t Next(int32_t node, uint8_t byte) const;

  StopStringOptions options_;
  std::vector<Node> nodes_;  // nodes_[0] is the root
  int32_t state_ = 0;        // automaton state after every byte fed so far
  std::string held_;         // the last nodes_[state_].depth bytes, not yet emitted
  std::optional<size_t> stop_index_;
  bool flushed_ = false;
};

}  // namespace xserv::router::output
