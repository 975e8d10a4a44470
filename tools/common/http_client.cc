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

absl::StatusOr<HttpResponse> PostJson(const HttpEndpoint& endpoint, const std::string& path,
                                      const std::string& json_body, const std::string& api_key,
                                      std::chrono::seconds timeout) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  boost::asio::ip::tcp::resolver resolver(io);
  const auto addresses = resolver.resolve(endpoint.host, endpoint.port, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("resolving ", endpoint.host, ": ", ec.message()));
  }
  stream.expires_after(timeout);
  stream.connect(addresses, ec);
  const std::string where = absl::StrCat(endpoint.host, ":", endpoint.port);
  if (ec) return absl::UnavailableError(absl::StrCat("connecting to ", where, ": ", ec.message()));
  http::request<http::string_body> req(http::verb::post, endpoint.base_path + path, 11);
  req.set(http::field::host, endpoint.host);
  req.set(http::field::content_type, "application/json");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  req.body() = json_body;
  req.prepare_payload();
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  if (!ec) http::read(stream, buffer, parser, ec);
  if (ec == beast::error::timeout) {
    return absl::DeadlineExceededError(absl::StrCat("no answer from ", where, " within ",
                                                    timeout.count(), " s"));
  }
  if (ec) return absl::UnavailableError(absl::StrCat(where, path, ": ", ec.message()));
  return HttpResponse{.status = static_cast<int>(parser.get().result_int()),
                      .body = parser.get().body()};
}

}  // namespace xserv::tools
