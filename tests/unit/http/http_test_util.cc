#include "tests/unit/http/http_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace xserv::http::testing {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

ParseState ParseResponse(std::string_view buffer, TestResponse& out, size_t& consumed,
                         bool head_only) {
  out = TestResponse();
  size_t head_end = buffer.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return ParseState::kNeedMore;
  std::string_view head = buffer.substr(0, head_end);
  size_t line_end = head.find("\r\n");
  std::string_view status_line = head.substr(0, line_end);
  if (status_line.substr(0, 9) != "HTTP/1.1 " || status_line.size() < 12) return ParseState::kError;
  out.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
  while (line_end != std::string_view::npos) {
    size_t next = head.find("\r\n", line_end + 2);
    std::string_view line = head.substr(line_end + 2, next == std::string_view::npos
                                                          ? std::string_view::npos
                                                          : next - line_end - 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return ParseState::kError;
    out.headers[Lower(line.substr(0, colon))] = std::string(Trim(line.substr(colon + 1)));
    line_end = next;
  }
  size_t pos = head_end + 4;
  if (head_only || out.status == 204 || out.status == 304 || out.status / 100 == 1) {
    consumed = pos;
    return ParseState::kComplete;
  }
  if (Lower(out.Header("transfer-encoding")) == "chunked") {
    out.chunked = true;
    for (;;) {
      size_t size_end = buffer.find("\r\n", pos);
      if (size_end == std::string_view::npos) return ParseState::kNeedMore;
      std::string size_text(buffer.substr(pos, size_end - pos));
      char* end = nullptr;
      unsigned long size = std::strtoul(size_text.c_str(), &end, 16);
      if (size_text.empty() || end != size_text.c_str() + size_text.size()) {
        return ParseState::kError;
      }
      pos = size_end + 2;
      if (buffer.size() < pos + size + 2) return ParseState::kNeedMore;
      if (buffer.substr(pos + size, 2) != "\r\n") return ParseState::kError;
      if (size == 0) {
        consumed = pos + 2;
        return ParseState::kComplete;
      }
      out.chunks.emplace_back(buffer.substr(pos, size));
      out.body.append(buffer.substr(pos, size));
      pos += size + 2;
    }
  }
  std::string length_text = out.Header("content-length");
  if (length_text.empty()) return ParseState::kError;  // our server always frames its bodies
  size_t length = std::strtoul(length_text.c_str(), nullptr, 10);
  if (buffer.size() < pos + length) return ParseState::kNeedMore;
  out.body = std::string(buffer.substr(pos, length));
  consumed = pos + length;
  return ParseState::kComplete;
}

std::vector<std::string> ParseSseEvents(std::string_view body, int* comments) {
  std::vector<std::string> events;
  std::string data;
  bool has_data = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) break;  // incomplete last line
    std::string_view line = body.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) {
      if (has_data) events.push_back(data);
      data.clear();
      has_data = false;
    } else if (line.front() == ':') {
      if (comments != nullptr) ++*comments;
    } else if (line.substr(0, 6) == "data: ") {
      if (has_data) data += '\n';
      data += line.substr(6);
      has_data = true;
    }
  }
  return events;
}

TestClient::TestClient(int port, std::chrono::milliseconds timeout) : timeout_(timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Close();
}

TestClient::~TestClient() { Close(); }

void TestClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestClient::ShutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

bool TestClient::Send(std::string_view bytes) {
  while (!bytes.empty() && fd_ >= 0) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return bytes.empty();
}

long TestClient::ReadOnce(std::chrono::steady_clock::time_point deadline) {
  if (fd_ < 0) return 0;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return -1;
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    char chunk[16384];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 0;  // reset counts as closed
    buffer_.append(chunk, static_cast<size_t>(n));
    return n;
  }
}

std::optional<TestResponse> TestClient::ReadResponse(bool head_only) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    TestResponse response;
    size_t consumed = 0;
    ParseState state = ParseResponse(buffer_, response, consumed, head_only);
    if (state == ParseState::kComplete) {
      buffer_.erase(0, consumed);
      return response;
    }
    if (state == ParseState::kError) return std::nullopt;
    if (ReadOnce(deadline) <= 0) return std::nullopt;
  }
}

bool TestClient::WaitClosed(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    long n = ReadOnce(deadline);
    if (n == 0) return true;
    if (n < 0) return false;
  }
}

size_t TestClient::ReadFor(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ReadOnce(deadline) > 0) {
  }
  return buffer_.size();
}

bool TestClient::ReadUntilCount(std::string_view needle, int count,
                                std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int found = 0;
    for (size_t p = buffer_.find(needle); p != std::string::npos;
         p = buffer_.find(needle, p + needle.size())) {
      ++found;
    }
    if (found >= count) return true;
    if (ReadOnce(deadline) <= 0) return false;
  }
}

std::string MakeRequest(std::string_view method, std::string_view target, std::string_view body,
                        std::string_view extra) {
  std::string r;
  r.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: localhost\r\n");
  if (!body.empty() || method == "POST") {
    r.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  r.append(extra).append("\r\n").append(body);
  return r;
}

long RaiseFileLimit(long wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < static_cast<rlim_t>(wanted)) {
    rlimit raised = limit;
    raised.rlim_cur = std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(wanted));
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<long>(limit.rlim_cur);
}

}  // namespace xserv::http::testing
