// Tools for hostile-client tests of the router: raw byte-level HTTP exchanges (malformed requests,
// slow senders), a checker for "a well-formed OpenAI answer", and a JSON body mutator.
// Blocking POSIX sockets on loopback; every helper is thread-safe (no shared state).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"

namespace xserv::testing {

// A connected loopback socket whose reads give up after `read_timeout`; -1 on failure.
inline int ConnectLoopback(int port, std::chrono::milliseconds read_timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{.tv_sec = static_cast<time_t>(read_timeout.count() / 1000),
             .tv_usec = static_cast<suseconds_t>(read_timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until the peer closes, the read times out, or one whole response (head + Content-Length
// body) has arrived.
inline std::string ReadResponse(int fd) {
  std::string out;
  char buf[16384];
  while (true) {
    const size_t head_end = out.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end) {
        const size_t length = std::stoul(out.substr(cl + 16));
        if (out.size() >= head_end + 4 + length) return out;
      }
    }
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// One raw exchange: sends `bytes` on a fresh connection, returns what came back.
inline std::string RawExchange(int port, std::string_view bytes,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const int fd = ConnectLoopback(port, timeout);
  if (fd < 0) return "";
  SendAll(fd, bytes);  // the server may answer (413) and close before reading it all
  std::string response = ReadResponse(fd);
  close(fd);
  return response;
}

// The status and body of a raw Content-Length response ({0, ""} when there is none).
inline HttpResult ParseRawResponse(const std::string& raw) {
  HttpResult r;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12 || head_end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.body = raw.substr(head_end + 4);
  return r;
}

// Why `r` is not a well-formed answer of an OpenAI-compatible server, or nullopt when it is:
// a 200 with a JSON object (or, for streams, SSE events of JSON objects ending in [DONE]), or a
// 4xx / 503 with {"error": {"message": string, "type": string, "param", "code"}}. Any other 5xx,
// a missing response or a body that is not valid UTF-8 JSON is a defect.
inline std::optional<std::string> CheckOpenAiAnswer(const HttpResult& r) {
  using nlohmann::json;
  if (r.status == 0) return "no HTTP response";
  if (r.status == 200) {
    if (r.body.rfind("data: ", 0) == 0) {
      const std::vector<std::string> events = r.SseData();
      if (events.empty() || events.back() != "[DONE]") return "SSE stream without [DONE]";
      for (size_t i = 0; i + 1 < events.size(); ++i) {
        if (!json::parse(events[i], nullptr, false).is_object()) return "bad SSE event";
      }
      return std::nullopt;
    }
    const json j = json::parse(r.body, nullptr, false);
    if (!j.is_object() || j.contains("error")) return "200 without a result object";
    return std::nullopt;
  }
  if (r.status >= 500 && r.status != 503) return "server error " + std::to_string(r.status);
  if (r.status < 400) return "unexpected status " + std::to_string(r.status);
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) {
    return "error body is not an OpenAI error";
  }
  const json& e = j["error"];
  if (!e.contains("message") || !e["message"].is_string() || !e.contains("type") ||
      !e["type"].is_string() || !e.contains("param") || !e.contains("code")) {
    return "error object lacks message/type/param/code";
  }
  return std::nullopt;
}

// Random byte-level mutations of a JSON text: flips, deletions, duplications, truncation and
// insertions of JSON-significant or hostile fragments (bad escapes, invalid UTF-8, huge numbers).
class JsonMutator {
 public:
  explicit JsonMutator(uint64_t seed) : rng_(seed) {}

  std::string Mutate(std::string s) {
    const int rounds = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < rounds; ++i) MutateOnce(s);
    return s;
  }

 private:
  size_t Below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  void MutateOnce(std::string& s) {
    static const std::vector<std::string> kFragments = {
        "{", "}", "[", "]", "\"", ",", ":", "null", "true", "-1", "1e999", "-0", "1.5e-400",
        "18446744073709551616", "\\u0000", "\\ud800", "\\udfff\\ud800", "\\x", "\\", "\xff",
        "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "NaN", "Infinity", "\"\":\"\"", "{}", "[]",
        "\"messages\"", "\"stream\":true", "\"n\":100000", "\"max_tokens\":-5", "\t\r\n", std::string("\0", 1)};
    const size_t pos = Below(s.size() + 1);
    switch (Below(6)) {
      case 0:
        if (!s.empty()) s[Below(s.size())] = static_cast<char>(Below(256));
        break;
      case 1:
        s.erase(pos, 1 + Below(8));
        break;
      case 2: {
        const size_t len = std::min(s.size() - std::min(pos, s.size()), 1 + Below(16));
        s.insert(pos, s.substr(pos, len));
        break;
      }
      case 3:
        s.resize(pos);
        break;
      default: {
        const std::string& f = kFragments[Below(kFragments.size())];
        s.insert(pos, f);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace xserv::testing
