// Test helpers for router/http: a blocking loopback HTTP client with time bounds, a response
// parser (Content-Length and chunked bodies, chunk boundaries kept), SSE event parsing and the
// RLIMIT_NOFILE helper. Single-threaded objects; use one TestClient per thread.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xserv::http::testing {

struct TestResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  std::vector<std::string> chunks;             // chunk payloads when chunked (last chunk omitted)
  bool chunked = false;

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

enum class ParseState { kComplete, kNeedMore, kError };

// Parses one response from the front of `buffer`; on kComplete sets `consumed`. `head_only`:
// the response has no body (answer to HEAD).
ParseState ParseResponse(std::string_view buffer, TestResponse& out, size_t& consumed,
                         bool head_only = false);

// "data:" payloads of the events in an SSE body (multi-line data joined with '\n'); comments
// (": ping") are counted in *comments when given.
std::vector<std::string> ParseSseEvents(std::string_view body, int* comments = nullptr);

class TestClient {
 public:
  explicit TestClient(int port, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~TestClient();
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool Send(std::string_view bytes);
  // One whole response (waits up to the timeout). nullopt on close, timeout or garbage.
  std::optional<TestResponse> ReadResponse(bool head_only = false);
  // Reads until the server closes; true if it did within `timeout` (EOF or reset).
  bool WaitClosed(std::chrono::milliseconds timeout);
  // Reads whatever arrives within `timeout` into the internal buffer; returns its size.
  size_t ReadFor(std::chrono::milliseconds timeout);
  // Reads until `needle` occurs `count` times in what was received, or the timeout.
  bool ReadUntilCount(std::string_view needle, int count, std::chrono::milliseconds timeout);
  const std::string& received() const { return buffer_; }
  void ShutdownWrite();
  void Close();

 private:
  // Reads once, waiting at most until `deadline`. >0 bytes, 0 on EOF, -1 on timeout or error.
  long ReadOnce(std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
};

// A complete request with Host and Content-Length; `extra` is raw "Name: value\r\n" lines.
std::string MakeRequest(std::string_view method, std::string_view target,
                        std::string_view body = {}, std::string_view extra = {});

// Raises RLIMIT_NOFILE to at least `wanted` if possible; returns the soft limit afterwards.
long RaiseFileLimit(long wanted);

}  // namespace xserv::http::testing
