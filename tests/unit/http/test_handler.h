// A small HttpHandler for the router/http tests: echo, 404, sleeps, throws, SSE streams. Probe
// counters are atomics so tests can read them from the test thread while I/O threads run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "router/http/http_server.h"

namespace xserv::http::testing {

struct Probe {
  std::atomic<int> handled{0};            // handler calls
  std::atomic<int> sse_finished{0};       // SSE handlers that returned
  std::atomic<int> sse_stopped_early{0};  // SSE handlers that stopped because the client left
  std::atomic<int> gone_fired{0};         // OnClientGone callbacks
  std::atomic<int64_t> last_gone_at_us{0};  // steady_clock time of the last OnClientGone, in us
  std::atomic<int> statuses_500{0};         // via on_response
};

int64_t NowMicros();

// Integer query parameter `key` of `query` ("a=1&b=2"), or `fallback`.
int QueryInt(std::string_view query, std::string_view key, int fallback);

boost::asio::awaitable<void> SleepFor(std::chrono::milliseconds duration);

// Routes on the path:
//   /echo            200 "<method> <target>\n<body>", header X-Body-Length
//   /sleep?ms=N      sleeps, then 200
//   /throw           throws std::runtime_error
//   /none            returns without a response
//   /close           200 with Connection: close
//   /inject          200 with a CR/LF header value (must be dropped)
//   /sse?n=N&delay_ms=D[&quiet_ms=Q][&pad=P]  SSE: optional quiet period, then N events
//                    "event <i>" followed by P bytes of padding; close=1 closes the connection
//   /sse-wait        SSE: one event, then waits (AsyncQueue) until the client is gone
//   /sse-throw       SSE: one event, then throws
//   /sse-multiline   SSE: one multi-line event named "update"
//   anything else    404
HttpHandler MakeTestHandler(Probe* probe);

}  // namespace xserv::http::testing
