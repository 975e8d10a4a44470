#include "tests/tools/sse_load_client.h"

#include "router/http/asio_includes.h"  // first: see the header's note on Boost 1.74

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <memory>

#include "nlohmann/json.hpp"

namespace xserv::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using Clock = std::chrono::steady_clock;
using tcp = asio::ip::tcp;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// State every stream coroutine shares. Single-threaded (one io_context thread): no locks.
struct Shared {
  explicit Shared(asio::io_context& io, const SseLoadOptions& o)
      : options(o), go(io, Clock::time_point::max()) {}
  const SseLoadOptions& options;
  std::string request;  // the HTTP request bytes, the same for every stream
  tcp::endpoint endpoint;
  asio::steady_timer go;  // cancelled once every stream has connected (or failed to)
  int num_arrived = 0;
  int num_streaming = 0;
  int peak_streaming = 0;
  Clock::time_point connect_start;
  Clock::time_point go_time;
  Clock::time_point last_end;

  void Arrived() {
    if (++num_arrived == options.num_streams) {
      go_time = Clock::now();
      go.cancel();
    }
  }
};

// Incremental "data: ...\n\n" event scanner over the chunked body.
class SseScanner {
 public:
  SseScanner(StreamResult& result, Clock::time_point start) : result_(result), start_(start) {}

  void Feed(std::string_view data) {
    pending_.append(data);
    size_t pos = 0;
    for (size_t end; (end = pending_.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
      OnEvent(std::string_view(pending_).substr(pos, end - pos));
    }
    pending_.erase(0, pos);
  }
  bool done() const { return done_; }

 private:
  void OnEvent(std::string_view event) {
    if (event.rfind("data: ", 0) != 0) return;  // ": ping" comments
    event.remove_prefix(6);
    if (event == "[DONE]") {
      done_ = true;
      result_.total_s = Seconds(Clock::now() - start_);
      return;
    }
    const nlohmann::json j = nlohmann::json::parse(event, nullptr, false);
    if (!j.is_object() || j.contains("error")) {
      result_.error = "error event: " + std::string(event.substr(0, 200));
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      result_.completion_tokens = j["usage"].value("completion_tokens", int64_t{-1});
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    if (num_chunks_++ == 0) result_.first_chunk_s = Seconds(Clock::now() - start_);
    const nlohmann::json& choice = j["choices"][0];
    const nlohmann::json& delta = choice["delta"];
    if (delta.is_object() && delta.contains("content") && delta["content"].is_string() &&
        !delta["content"].get_ref<const std::string&>().empty()) {
      if (result_.num_content_chunks++ == 0) {
        result_.first_content_s = Seconds(Clock::now() - start_);
        result_.first_content_chunk_index = num_chunks_ - 1;
      }
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      result_.finish_reason = choice["finish_reason"];
    }
  }

  StreamResult& result_;
  const Clock::time_point start_;
  std::string pending_;
  int num_chunks_ = 0;  // events with a choice
  bool done_ = false;
};

asio::awaitable<void> RunStream(Shared& shared, StreamResult& result) {
  tcp::socket socket(co_await asio::this_coro::executor);
  boost::system::error_code ec;
  const Clock::time_point connect_start = Clock::now();
  co_await socket.async_connect(shared.endpoint, asio::redirect_error(asio::use_awaitable, ec));
  result.connect_s = Seconds(Clock::now() - connect_start);
  shared.Arrived();
  if (ec) {
    result.error = "connect: " + ec.message();
    co_return;
  }
  if (shared.num_arrived < shared.options.num_streams) {
    boost::system::error_code wait_ec;  // operation_aborted: the barrier opened
    co_await shared.go.async_wait(asio::redirect_error(asio::use_awaitable, wait_ec));
  }
  const Clock::time_point start = Clock::now();
  co_await asio::async_write(socket, asio::buffer(shared.request),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "write: " + ec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(boost::none);
  SseScanner scanner(result, start);
  auto on_chunk = [&scanner](std::uint64_t, beast::string_view data,
                             boost::system::error_code&) -> std::size_t {
    scanner.Feed(std::string_view(data.data(), data.size()));
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  co_await bhttp::async_read_header(socket, buffer, parser,
                                    asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "read head: " + ec.message();
    co_return;
  }
  result.http_status = static_cast<int>(parser.get().result_int());
  const bool streaming = result.http_status == 200;
  if (streaming) {
    shared.peak_streaming = std::max(shared.peak_streaming, ++shared.num_streaming);
  }
  while (!parser.is_done() && !ec) {
    co_await bhttp::async_read_some(socket, buffer, parser,
                                    asio::redirect_error(asio::use_awaitable, ec));
  }
  if (streaming) --shared.num_streaming;
  shared.last_end = std::max(shared.last_end, Clock::now());
  if (result.http_status != 200) {
    result.error = "HTTP " + std::to_string(result.http_status) + ": " +
                   parser.get().body().substr(0, 200);
  } else if (ec) {
    result.error = "read: " + ec.message();
  } else if (!scanner.done()) {
    result.error = "stream ended without [DONE]";
  } else if (result.error.empty() && result.finish_reason.empty()) {
    result.error = "no finish_reason";
  }
  result.ok = result.error.empty();
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

}  // namespace

SseLoadResult RunSseLoad(const SseLoadOptions& options) {
  asio::io_context io(1);
  Shared shared(io, options);
  shared.endpoint = tcp::endpoint(asio::ip::make_address(options.host),
                                  static_cast<unsigned short>(options.port));
  shared.request = "POST /v1/chat/completions HTTP/1.1\r\nHost: " + options.host +
                   "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                   "Content-Length: " + std::to_string(options.request_body.size()) + "\r\n\r\n" +
                   options.request_body;
  SseLoadResult out;
  out.streams.resize(static_cast<size_t>(options.num_streams));
  shared.connect_start = Clock::now();
  for (StreamResult& r : out.streams) {
    asio::co_spawn(io, RunStream(shared, r), asio::detached);
  }
  io.run_for(options.deadline);
  for (StreamResult& r : out.streams) {
    if (!r.ok && r.error.empty()) r.error = "deadline passed";
  }
  out.peak_concurrent_streams = shared.peak_streaming;
  out.connect_phase_s = Seconds(shared.go_time - shared.connect_start);
  out.stream_phase_s = Seconds(shared.last_end - shared.go_time);
  return out;
}

}  // namespace xserv::testing
