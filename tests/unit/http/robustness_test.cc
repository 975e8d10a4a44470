// Hostile input: thousands of random, mutated, truncated and oversized requests from several
// threads. The server must never crash or hang a connection, and must still serve afterwards.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "router/http/http_server.h"
#include "tests/unit/http/http_test_util.h"
#include "tests/unit/http/test_handler.h"

namespace xserv::http {
namespace {

using namespace std::chrono_literals;
using testing::MakeRequest;
using testing::TestClient;

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// One hostile request, chosen by `kind`.
std::string HostileRequest(std::mt19937& rng, int kind) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::string valid = MakeRequest("POST", "/echo?q=1", "{\"a\":[1,2,3]}",
                                        "Content-Type: application/json\r\n");
  switch (kind) {
    case 0:
      return RandomBytes(rng, 1 + pick(2000));
    case 1: {  // a valid request with a few bytes flipped
      std::string s = valid;
      for (int i = 0, n = 1 + pick(5); i < n; ++i) s[pick(s.size())] = static_cast<char>(rng());
      return s;
    }
    case 2:  // truncated
      return valid.substr(0, pick(valid.size()));
    case 3:  // one huge header
      return "GET /echo HTTP/1.1\r\nX-Huge: " + std::string(20000 + pick(50000), 'h') + "\r\n\r\n";
    case 4: {  // very many headers
      std::string s = "GET /echo HTTP/1.1\r\n";
      for (int i = 0, n = 200 + pick(2000); i < n; ++i) s += "X-" + std::to_string(i) + ": v\r\n";
      return s + "\r\n";
    }
    case 5: {  // broken Content-Length
      const char* lengths[] = {"-1", "abc", "99999999999999999999999", "5, 6", " ", "0x10"};
      return std::string("POST /echo HTTP/1.1\r\nContent-Length: ") + lengths[pick(6)] +
             "\r\n\r\nhello";
    }
    case 6: {  // broken chunked bodies
      const std::string bodies[] = {"zz\r\nhello\r\n0\r\n\r\n", "ffffffffffffffffffff\r\nx\r\n",
                                    "5\r\nhelloXX0\r\n\r\n",
                                    "3;" + std::string(10000, 'e') + "\r\nabc\r\n0\r\n\r\n",
                                    "5\r\nhel"};
      return "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + bodies[pick(5)];
    }
    case 7:  // request smuggling shape: both framings
      return "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
             "0\r\n\r\nGET /echo HTTP/1.1\r\n\r\n";
    case 8:  // NUL and control bytes in the start line, huge target
      return pick(2) ? std::string("GET /e\0cho HTTP/1.1\r\n\r\n", 24)
                     : "GET /" + std::string(30000, 'a') + " HTTP/1.1\r\n\r\n";
    case 9: {  // odd methods and versions
      const char* lines[] = {"FOO / HTTP/1.1", "GET / HTTP/9.9", "GET / HTTP/1", "GET /",
                             " GET / HTTP/1.1", "GET  /  HTTP/1.1", "G\x01T / HTTP/1.1"};
      return std::string(lines[pick(7)]) + "\r\nHost: x\r\n\r\n";
    }
    case 10:  // invalid UTF-8 in a well-framed body: fine for HTTP
      return MakeRequest("POST", "/echo", RandomBytes(rng, 1 + pick(500)));
    case 11:  // obs-fold, bare LF, header without colon
      return pick(2) ? "GET /echo HTTP/1.1\r\nX-A: a\r\n folded\r\n\r\n"
                     : "GET /echo HTTP/1.1\nHost: x\nNoColon\n\n";
    default:  // Expect: 100-continue and then nothing
      return "POST /echo HTTP/1.1\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n";
  }
}

TEST(HttpRobustnessTest, SurvivesThousandsOfHostileRequests) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 400;  // 3,200 connections
  testing::Probe probe;
  auto server = HttpServer::Start(
      HttpServerOptions{.port = 0,
                        .threads = 2,
                        .max_body_bytes = 64 * 1024,
                        .max_header_bytes = 8 * 1024,
                        .max_connections = 1000,
                        .read_timeout = 1000ms,
                        .idle_timeout = 1000ms,
                        .write_timeout = 2000ms,
                        .stop_grace = 500ms},
      testing::MakeTestHandler(&probe));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  std::mutex mu;
  std::map<int, int> statuses;  // first status seen per connection (0: none)
  std::atomic<int> hung{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(12345 + t);
      for (int i = 0; i < kPerThread; ++i) {
        TestClient client(port, 3s);
        if (!client.connected()) continue;
        client.Send(HostileRequest(rng, static_cast<int>(rng() % 13)));
        client.ShutdownWrite();  // the peer's EOF must end every half-request promptly
        bool closed = client.WaitClosed(3s);
        if (!closed) ++hung;
        int status = 0;
        const std::string& raw = client.received();
        if (raw.size() >= 12 && raw.compare(0, 9, "HTTP/1.1 ") == 0) {
          status = std::atoi(raw.substr(9, 3).c_str());
        }
        std::lock_guard<std::mutex> lock(mu);
        ++statuses[status];
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto elapsed = std::chrono::steady_clock::now() - t0;

  std::string summary;
  for (auto [status, count] : statuses) {
    summary += " " + std::to_string(status) + ":" + std::to_string(count);
  }
  std::printf("[ fuzz ] %d hostile connections in %lld ms; first status counts:%s\n",
              kThreads * kPerThread,
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()),
              summary.c_str());
  EXPECT_EQ(hung.load(), 0);
  EXPECT_GT(statuses[400], 0);
  EXPECT_GT(statuses[431], 0);
  EXPECT_EQ(statuses[500], 0);

  // Partial requests that are left open (no EOF) are cut by the read timeout, all at once.
  std::vector<std::unique_ptr<TestClient>> stalled;
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    stalled.push_back(std::make_unique<TestClient>(port, 3s));
    stalled.back()->Send(HostileRequest(rng, 2 + 10 * (i % 2)));  // truncated / Expect and stop
  }
  const auto stalled_at = std::chrono::steady_clock::now();
  int stalled_closed = 0;
  for (auto& c : stalled) stalled_closed += c->WaitClosed(3s) ? 1 : 0;
  EXPECT_EQ(stalled_closed, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - stalled_at, 2500ms);
  stalled.clear();

  // Still serving, and every hostile connection is gone.
  TestClient client(port);
  ASSERT_TRUE(client.Send(MakeRequest("POST", "/echo", "still alive")));
  auto r = client.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "POST /echo\nstill alive");
  client.Close();
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while ((*server)->num_connections() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ((*server)->num_connections(), 0u);
}

}  // namespace
}  // namespace xserv::http
