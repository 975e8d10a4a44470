// HttpServer over real loopback sockets: round trips, keep-alive, limits, bad input, timeouts,
// connection limits and graceful stop.
#include "router/http/http_server.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/http/http_test_util.h"
#include "tests/unit/http/test_handler.h"

namespace xserv::http {
namespace {

using namespace std::chrono_literals;
using testing::MakeRequest;
using testing::TestClient;
using testing::TestResponse;

class HttpServerTest : public ::testing::Test {
 protected:
  static HttpServerOptions TestOptions() {
    return HttpServerOptions{
        .host = "127.0.0.1",
        .port = 0,
        .threads = 2,
        .max_body_bytes = 64 * 1024,
        .max_header_bytes = 4 * 1024,
        .max_connections = 64,
        .read_timeout = 1000ms,
        .idle_timeout = 1500ms,
        .write_timeout = 2000ms,
        .stop_grace = 1000ms,
    };
  }

  void Start(HttpServerOptions options = TestOptions()) {
    options.on_response = [this](int status) {
      if (status == 500) ++probe_.statuses_500;
    };
    auto server = HttpServer::Start(std::move(options), testing::MakeTestHandler(&probe_));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::optional<TestResponse> Exchange(TestClient& client, const std::string& request) {
    if (!client.Send(request)) return std::nullopt;
    return client.ReadResponse();
  }

  testing::Probe probe_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, GetAndPostRoundTrip) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.connected());
  auto get = Exchange(client, MakeRequest("GET", "/echo?x=1"));
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->body, "GET /echo?x=1\n");
  EXPECT_EQ(get->Header("content-type"), "text/plain");
  EXPECT_EQ(get->Header("x-body-length"), "0");
  EXPECT_EQ(get->Header("date").size(), 29u);  // "Sun, 06 Nov 1994 08:49:37 GMT"

  std::string payload = R"({"prompt":"hello"})";
  auto post = Exchange(client, MakeRequest("POST", "/echo", payload,
                                           "Content-Type: application/json\r\n"));
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->status, 200);
  EXPECT_EQ(post->body, "POST /echo\n" + payload);
}

TEST_F(HttpServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  Start();
  TestClient client(server_->port());
  for (int i = 0; i < 20; ++i) {
    auto r = Exchange(client, MakeRequest("POST", "/echo", "n" + std::to_string(i)));
    ASSERT_TRUE(r.has_value()) << i;
    EXPECT_EQ(r->body, "POST /echo\nn" + std::to_string(i));
    EXPECT_EQ(r->Header("connection"), "");
  }
  // Pipelined: two requests in one write, answered in order.
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/echo?a") + MakeRequest("GET", "/echo?b")));
  auto a = client.ReadResponse();
  auto b = client.ReadResponse();
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->body, "GET /echo?a\n");
  EXPECT_EQ(b->body, "GET /echo?b\n");
  EXPECT_EQ(server_->num_connections(), 1u);
}

TEST_F(HttpServerTest, HandlerDecidesStatusForUnknownPathsAndMethods) {
  Start();
  TestClient client(server_->port());
  auto r = Exchange(client, MakeRequest("GET", "/nope"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 404);
  auto odd = Exchange(client, MakeRequest("BREW", "/echo"));
  ASSERT_TRUE(odd.has_value());
  EXPECT_EQ(odd->status, 200);
  EXPECT_EQ(odd->body, "BREW /echo\n");
  ASSERT_TRUE(client.Send(MakeRequest("HEAD", "/echo")));
  auto head = client.ReadResponse(/*head_only=*/true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-length"), "11");  // "HEAD /echo\n"
  auto after = Exchange(client, MakeRequest("GET", "/echo"));  // no stray body bytes
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->body, "GET /echo\n");
}

TEST_F(HttpServerTest, ChunkedBodyAndExpectContinue) {
  Start();
  TestClient client(server_->port());
  std::string chunked =
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  auto r = Exchange(client, chunked);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "POST /echo\nhello world");

  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                          "Expect: 100-continue\r\n\r\n"));
  auto cont = client.ReadResponse();
  ASSERT_TRUE(cont.has_value());
  EXPECT_EQ(cont->status, 100);
  ASSERT_TRUE(client.Send("body"));
  auto final_response = client.ReadResponse();
  ASSERT_TRUE(final_response.has_value());
  EXPECT_EQ(final_response->status, 200);
  EXPECT_EQ(final_response->body, "POST /echo\nbody");
}

TEST_F(HttpServerTest, BodyOverLimitGets413) {
  Start();
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"));
    auto r = client.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(r->Header("connection"), "close");
    EXPECT_TRUE(client.WaitClosed(2s));
  }
  {
    TestClient client(server_->port());
    std::string chunk(32 * 1024, 'x');
    std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 3; ++i) request += "8000\r\n" + chunk + "\r\n";
    client.Send(request);  // may fail half-way once the server gave up
    auto r = client.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 413);
  }
  EXPECT_EQ(probe_.handled.load(), 0);
}

TEST_F(HttpServerTest, GarbageGets400AndClose) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send("THIS IS NOT HTTP\r\n\r\n"));
  auto r = client.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(client.WaitClosed(2s));

  TestClient bad_header(server_->port());
  ASSERT_TRUE(bad_header.Send("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"));
  auto r2 = bad_header.ReadResponse();
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->status, 400);

  TestClient huge(server_->port());
  ASSERT_TRUE(huge.Send("GET / HTTP/1.1\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n"));
  auto r3 = huge.ReadResponse();
  ASSERT_TRUE(r3.has_value());
  EXPECT_EQ(r3->status, 431);
  EXPECT_EQ(probe_.handled.load(), 0);
}

TEST_F(HttpServerTest, HandlerErrorsBecome500AndConnectionSurvives) {
  Start();
  TestClient client(server_->port());
  auto thrown = Exchange(client, MakeRequest("GET", "/throw"));
  ASSERT_TRUE(thrown.has_value());
  EXPECT_EQ(thrown->status, 500);
  auto none = Exchange(client, MakeRequest("GET", "/none"));
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->status, 500);
  auto ok = Exchange(client, MakeRequest("GET", "/echo"));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(probe_.statuses_500.load(), 2);
}

TEST_F(HttpServerTest, ResponseHeadersAreSanitisedAndConnectionCloseHonoured) {
  Start();
  TestClient client(server_->port());
  auto r = Exchange(client, MakeRequest("GET", "/inject"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Header("x-good"), "1");
  EXPECT_EQ(r->Header("x-bad"), "");
  EXPECT_EQ(r->Header("set-cookie"), "");
  auto closing = Exchange(client, MakeRequest("GET", "/close"));
  ASSERT_TRUE(closing.has_value());
  EXPECT_EQ(closing->Header("connection"), "close");
  EXPECT_TRUE(client.WaitClosed(2s));

  TestClient asks_close(server_->port());
  auto r2 = Exchange(asks_close, MakeRequest("GET", "/echo", {}, "Connection: close\r\n"));
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->Header("connection"), "close");
  EXPECT_TRUE(asks_close.WaitClosed(2s));

  TestClient http10(server_->port());
  ASSERT_TRUE(http10.Send("GET /echo HTTP/1.0\r\n\r\n"));
  auto r3 = http10.ReadResponse();
  ASSERT_TRUE(r3.has_value());
  EXPECT_EQ(r3->status, 200);
  EXPECT_TRUE(http10.WaitClosed(2s));
}

TEST_F(HttpServerTest, SlowlorisIsCutAfterReadTimeoutWithoutHurtingOthers) {
  Start();
  auto start = std::chrono::steady_clock::now();
  TestClient slow(server_->port());
  ASSERT_TRUE(slow.Send("GET /echo HTTP/1.1\r\nHost: x\r\n"));  // never finished
  TestClient trickle(server_->port());
  std::atomic<bool> trickling{true};
  std::thread trickler([&] {  // one header byte every 100 ms: per-read timers would never fire
    std::string bytes = "POST /echo HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
    for (char c : bytes) {
      if (!trickling || !trickle.Send(std::string(1, c))) break;
      std::this_thread::sleep_for(100ms);
    }
  });
  // Meanwhile normal clients are served promptly.
  TestClient normal(server_->port());
  for (int i = 0; i < 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = Exchange(normal, MakeRequest("GET", "/echo"));
    ASSERT_TRUE(r.has_value());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 300ms);
    std::this_thread::sleep_for(20ms);
  }
  auto r = slow.ReadResponse();
  auto slow_elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(slow.WaitClosed(2s));
  EXPECT_LT(slow_elapsed, 2000ms);
  EXPECT_GE(slow_elapsed, 900ms);
  EXPECT_TRUE(trickle.WaitClosed(2s));
  trickling = false;
  trickler.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3000ms);
  EXPECT_EQ(probe_.handled.load(), 20);
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionIsClosed) {
  Start();
  TestClient client(server_->port());
  auto r = Exchange(client, MakeRequest("GET", "/echo"));
  ASSERT_TRUE(r.has_value());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.WaitClosed(3s));
  auto idle = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(idle, 1300ms);
  EXPECT_LT(idle, 2500ms);
  EXPECT_TRUE(client.received().empty());  // closed silently
}

TEST_F(HttpServerTest, ConnectionsBeyondTheLimitGet503) {
  HttpServerOptions options = TestOptions();
  options.max_connections = 4;
  Start(options);
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<TestClient>(server_->port()));
    auto r = Exchange(*clients.back(), MakeRequest("GET", "/echo"));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
  }
  TestClient extra(server_->port());
  extra.Send(MakeRequest("GET", "/echo"));
  auto refused = extra.ReadResponse();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 503);
  EXPECT_TRUE(extra.WaitClosed(2s));

  clients.pop_back();  // frees a slot (asynchronously)
  bool served = false;
  for (int attempt = 0; attempt < 50 && !served; ++attempt) {
    TestClient again(server_->port());
    auto r = Exchange(again, MakeRequest("GET", "/echo"));
    served = r.has_value() && r->status == 200;
    if (!served) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(served);
}

TEST_F(HttpServerTest, StopClosesIdleConnectionsAndFinishesInFlightOnes) {
  Start();
  TestClient idle(server_->port());
  ASSERT_TRUE(Exchange(idle, MakeRequest("GET", "/echo")).has_value());
  TestClient busy(server_->port());
  ASSERT_TRUE(busy.Send(MakeRequest("GET", "/sleep?ms=300")));
  std::this_thread::sleep_for(50ms);
  auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms);
  EXPECT_TRUE(idle.WaitClosed(1s));
  auto r = busy.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("connection"), "close");
  TestClient late(server_->port());
  EXPECT_FALSE(late.connected() && Exchange(late, MakeRequest("GET", "/echo")).has_value());
}

TEST_F(HttpServerTest, StartRejectsBadOptionsAndBusyPorts) {
  HttpServerOptions bad = TestOptions();
  bad.threads = 0;
  EXPECT_FALSE(HttpServer::Start(bad, testing::MakeTestHandler(&probe_)).ok());
  Start();
  HttpServerOptions same_port = TestOptions();
  same_port.port = server_->port();
  auto second = HttpServer::Start(same_port, testing::MakeTestHandler(&probe_));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace xserv::http
