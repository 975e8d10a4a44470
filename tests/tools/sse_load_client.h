// SseLoadClient: opens many concurrent OpenAI chat-completion SSE streams against one router and
// times each: connect, first content chunk and [DONE], relative to the moment its request was
// written. All connections are opened first; then every request is sent at once, so the streams
// overlap for as long as the worker takes to generate them.
//
// Threading: RunSseLoad() runs one io_context on the calling thread (one client thread keeps the
// client's own cost small and predictable on a shared machine) and returns when every stream has
// ended or the deadline passed. Not reentrant-safe across threads; call it from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace xserv::testing {

struct SseLoadOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int num_streams = 2000;
  std::string request_body;  // a chat request with "stream": true (and include_usage)
  std::chrono::seconds deadline{300};
};

struct StreamResult {
  bool ok = false;     // 200, [DONE] seen, a finish_reason and no error event
  std::string error;   // why not ok
  int http_status = 0;
  double connect_s = 0;
  double first_chunk_s = -1;    // request written -> the first chunk (the router sends it, with
                                // the role, as soon as the worker's first token arrives)
  double first_content_s = -1;  // request written -> first chunk with non-empty delta.content
  // Chunks before the first content chunk. Each chunk carries at least one token, so the first
  // content came from token first_content_chunk_index or later (special tokens such as
  // <|im_start|> produce no content).
  int first_content_chunk_index = -1;
  double total_s = -1;          // request written -> [DONE]
  int num_content_chunks = 0;
  int64_t completion_tokens = -1;  // from the usage chunk
  std::string finish_reason;
};

struct SseLoadResult {
  std::vector<StreamResult> streams;
  int peak_concurrent_streams = 0;  // streams with a 200 head and no [DONE] yet, at most
  double connect_phase_s = 0;       // opening every connection
  double stream_phase_s = 0;        // first request written -> last stream ended
};

SseLoadResult RunSseLoad(const SseLoadOptions& options);

}  // namespace xserv::testing
