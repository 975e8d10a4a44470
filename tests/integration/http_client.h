// A minimal blocking HTTP/1.1 client for integration tests (Boost.Beast, loopback only).
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace xserv::testing {

struct HttpResult {
  int status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string Header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return "";
  }
  nlohmann::json Json() const { return nlohmann::json::parse(body, nullptr, false); }
  // The "data: ..." payloads of an SSE body, in order.
  std::vector<std::string> SseData() const {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n", pos);
      out.push_back(body.substr(pos + 6, end - pos - 6));
      pos = end;
    }
    return out;
  }
};

inline HttpResult HttpCall(int port, const std::string& method, const std::string& target,
                           const std::string& body = "",
                           std::vector<std::pair<std::string, std::string>> headers = {}) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  parser.skip(method == "HEAD");  // a HEAD answer's Content-Length announces no body
  beast::error_code ec;
  http::read(socket, buffer, parser, ec);
  HttpResult result;
  if (ec) return result;
  result.status = static_cast<int>(parser.get().result_int());
  result.body = parser.get().body();
  for (const auto& field : parser.get()) {
    result.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return result;
}

inline HttpResult Post(int port, const std::string& target, const nlohmann::json& body,
                       std::vector<std::pair<std::string, std::string>> headers = {}) {
  return HttpCall(port, "POST", target, body.dump(), std::move(headers));
}

}  // namespace xserv::testing
