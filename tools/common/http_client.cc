#include "tools/common/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"

namespace xserv::tools {

absl::StatusOr<HttpEndpoint> HttpEndpoint::Parse(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("URL must start with http://, got '", url, "'"));
  }
  std::string rest = url.substr(kScheme.size());
  HttpEndpoint e;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    e.base_path = rest.substr(slash);
    while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  e.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  e.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (e.host.empty() || e.port.empty() ||
      e.port.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse host:port of '", url, "'"));
  }
  return e;
}

namespace {

namespace beast = boost::beast;
namespace http = beast::http;

// One connected stream with the request written; Unavailable naming the server otherwise.
absl::Status Connect(const HttpEndpoint& e, const std::string& path, const std::string& body,
                     const std::string& api_key, std::chrono::seconds timeout,
                     boost::asio::io_context& io, beast::tcp_stream& stream) {
  beast::error_code ec;
  boost::asio::ip::tcp::resolver resolver(io);
  const auto addresses = resolver.resolve(e.host, e.port, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("resolving ", e.host, ": ", ec.message()));
  stream.expires_after(timeout);
  stream.connect(addresses, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("connecting to ", e.host, ":", e.port, ": ", ec.message()));
  }
  http::request<http::string_body> req(http::verb::post, e.base_path + path, 11);
  req.set(http::field::host, e.host);
  req.set(http::field::content_type, "application/json");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(e.host, ":", e.port, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status ReadError(const HttpEndpoint& e, const std::string& path, beast::error_code ec,
                       std::chrono::seconds timeout) {
  if (ec == beast::error::timeout) {
    return absl::DeadlineExceededError(absl::StrCat("no answer from ", e.host, ":", e.port,
                                                    " within ", timeout.count(), " s"));
  }
  return absl::UnavailableError(absl::StrCat(e.host, ":", e.port, path, ": ", ec.message()));
}

}  // namespace

absl::StatusOr<HttpResponse> PostJson(const HttpEndpoint& endpoint, const std::string& path,
                                      const std::string& json_body, const std::string& api_key,
                                      std::chrono::seconds timeout) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  if (absl::Status s = Connect(endpoint, path, json_body, api_key, timeout, io, stream); !s.ok()) {
    return s;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  beast::error_code ec;
  http::read(stream, buffer, parser, ec);
  if (ec) return ReadError(endpoint, path, ec, timeout);
  return HttpResponse{.status = static_cast<int>(parser.get().result_int()),
                      .body = parser.get().body()};
}

absl::StatusOr<HttpResponse> PostJsonStreaming(
    const HttpEndpoint& endpoint, const std::string& path, const std::string& json_body,
    const std::string& api_key, std::chrono::seconds timeout,
    const std::function<bool(int, std::string_view)>& on_body) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  if (absl::Status s = Connect(endpoint, path, json_body, api_key, timeout, io, stream); !s.ok()) {
    return s;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  beast::error_code ec;
  http::read_header(stream, buffer, parser, ec);
  if (ec) return ReadError(endpoint, path, ec, timeout);
  char chunk[8192];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    stream.expires_after(timeout);  // the timeout bounds silence, not the whole stream
    // read_some: hand over what has arrived (an SSE event) instead of waiting for a full chunk.
    http::read_some(stream, buffer, parser, ec);
    if (ec && ec != http::error::need_buffer) return ReadError(endpoint, path, ec, timeout);
    const size_t got = sizeof(chunk) - parser.get().body().size;
    const int status = static_cast<int>(parser.get().result_int());
    if (got > 0 && !on_body(status, std::string_view(chunk, got))) break;
  }
  return HttpResponse{.status = static_cast<int>(parser.get().result_int()), .body = {}};
}

std::vector<std::string> SseReader::Feed(std::string_view bytes) {
  pending_.append(bytes);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.rfind("data: ", 0) == 0) out.emplace_back(line.substr(6));
  }
  pending_.erase(0, start);
  return out;
}

}  // namespace xserv::tools
