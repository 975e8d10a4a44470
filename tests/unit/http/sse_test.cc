// Server-sent events over real loopback sockets: framing, pings, client disconnects, and 2,000
// concurrent streams on two server threads.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "router/http/async_queue.h"
#include "router/http/http_server.h"
#include "tests/unit/http/http_test_util.h"
#include "tests/unit/http/test_handler.h"

namespace xserv::http {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::MakeRequest;
using testing::TestClient;

HttpServerOptions SseOptions() {
  return HttpServerOptions{.port = 0,
                           .threads = 2,
                           .max_connections = 5000,
                           .read_timeout = 10s,
                           .idle_timeout = 10s,
                           .write_timeout = 5s,
                           .sse_ping_interval = 60s,
                           .stop_grace = 1s};
}

class SseTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = SseOptions()) {
    auto server = HttpServer::Start(std::move(options), testing::MakeTestHandler(&probe_));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  template <typename Pred>
  static bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
    return true;
  }

  testing::Probe probe_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(SseTest, StreamsEventsInOrderOneChunkEach) {
  Start();
  TestClient client(server_->port(), 10s);
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse?n=100&delay_ms=2")));
  auto r = client.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type"), "text/event-stream");
  EXPECT_EQ(r->Header("cache-control"), "no-cache");
  EXPECT_EQ(r->Header("x-stream"), "yes");
  EXPECT_TRUE(r->chunked);
  ASSERT_EQ(r->chunks.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(r->chunks[i], "data: event " + std::to_string(i) + "\n\n");
  }
  EXPECT_EQ(testing::ParseSseEvents(r->body).size(), 100u);
  // The connection is kept alive after the terminal chunk.
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/echo")));
  auto next = client.ReadResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->body, "GET /echo\n");
}

TEST_F(SseTest, HandlerCanCloseTheConnectionAfterAStream) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse?n=2&close=1")));
  auto r = client.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->chunks.size(), 2u);
  EXPECT_TRUE(client.WaitClosed(2s));
}

TEST_F(SseTest, MultiLineDataAndEventNames) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse-multiline")));
  auto r = client.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "event: update\ndata: line1\ndata: line2\ndata: line3\n\n");
  auto events = testing::ParseSseEvents(r->body);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "line1\nline2\nline3");
}

TEST_F(SseTest, QuietStreamsGetPings) {
  HttpServerOptions options = SseOptions();
  options.sse_ping_interval = 100ms;
  Start(options);
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse?n=1&quiet_ms=550")));
  auto r = client.ReadResponse();
  ASSERT_TRUE(r.has_value());
  int comments = 0;
  auto events = testing::ParseSseEvents(r->body, &comments);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "event 0");
  EXPECT_GE(comments, 3);
  EXPECT_LE(comments, 6);
  EXPECT_EQ(r->chunks.front(), ": ping\n\n");
}

TEST_F(SseTest, DisconnectMidStreamFiresClientGoneAndStopsHandler) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse?n=100000&delay_ms=20")));
  ASSERT_TRUE(client.ReadUntilCount("data: ", 3, 5s));
  const int64_t closed_at = testing::NowMicros();
  client.Close();
  ASSERT_TRUE(WaitFor([&] { return probe_.gone_fired.load() == 1; }, 2s));
  EXPECT_LT(probe_.last_gone_at_us.load() - closed_at, 1'000'000);
  ASSERT_TRUE(WaitFor([&] { return probe_.sse_finished.load() == 1; }, 2s));
  EXPECT_EQ(probe_.sse_stopped_early.load(), 1);
  EXPECT_LT(testing::NowMicros() - closed_at, 1'000'000);
  EXPECT_TRUE(WaitFor([&] { return server_->num_connections() == 0; }, 2s));
}

TEST_F(SseTest, DisconnectWhileHandlerWaitsIsSeenWithoutAnyWrite) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse-wait")));
  ASSERT_TRUE(client.ReadUntilCount("data: waiting", 1, 5s));
  const int64_t closed_at = testing::NowMicros();
  client.Close();
  ASSERT_TRUE(WaitFor([&] { return probe_.sse_finished.load() == 1; }, 2s));
  EXPECT_EQ(probe_.gone_fired.load(), 1);
  EXPECT_LT(probe_.last_gone_at_us.load() - closed_at, 1'000'000);
}

TEST_F(SseTest, ClientThatStopsReadingIsCutByTheWriteTimeout) {
  HttpServerOptions options = SseOptions();
  options.write_timeout = 300ms;
  Start(options);
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse?n=100000&pad=65536")));
  // Never read: the socket buffers fill up, then a write makes no progress.
  ASSERT_TRUE(WaitFor([&] { return probe_.sse_finished.load() == 1; }, 10s));
  EXPECT_EQ(probe_.gone_fired.load(), 1);
  EXPECT_EQ(probe_.sse_stopped_early.load(), 1);
  EXPECT_TRUE(WaitFor([&] { return server_->num_connections() == 0; }, 2s));
}

TEST_F(SseTest, StopCutsStreamsAfterTheGracePeriod) {
  HttpServerOptions options = SseOptions();
  options.stop_grace = 300ms;
  Start(options);
  TestClient a(server_->port());
  TestClient b(server_->port());
  ASSERT_TRUE(a.Send(MakeRequest("GET", "/sse-wait")));
  ASSERT_TRUE(b.Send(MakeRequest("GET", "/sse?n=100000&delay_ms=10")));
  ASSERT_TRUE(a.ReadUntilCount("data: waiting", 1, 5s));
  ASSERT_TRUE(b.ReadUntilCount("data: ", 2, 5s));
  auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1500ms);
  EXPECT_EQ(probe_.sse_finished.load(), 2);
  EXPECT_EQ(probe_.gone_fired.load(), 2);
  EXPECT_TRUE(a.WaitClosed(1s));
  EXPECT_TRUE(b.WaitClosed(1s));
}

TEST_F(SseTest, ExceptionMidStreamTruncatesTheResponse) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(MakeRequest("GET", "/sse-throw")));
  EXPECT_FALSE(client.ReadResponse().has_value());  // no terminal chunk: incomplete
  EXPECT_NE(client.received().find("data: first\n\n"), std::string::npos);
  EXPECT_TRUE(client.WaitClosed(2s));
}

TEST_F(SseTest, Http10ClientsGetACloseDelimitedStream) {
  Start();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send("GET /sse?n=3 HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(client.WaitClosed(3s));
  const std::string& raw = client.received();
  EXPECT_EQ(raw.find("Transfer-Encoding"), std::string::npos);
  size_t body = raw.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_EQ(raw.substr(body + 4), "data: event 0\n\ndata: event 1\n\ndata: event 2\n\n");
}

// ---- Load: 2,000 streams open at once ----

// Each stream sends "hello", waits until all streams are open, then sends kEvents events. The
// last stream to open releases the others through their AsyncQueues (pushed from its strand).
struct Barrier {
  explicit Barrier(int n) : target(n) {}
  std::mutex mu;
  std::vector<std::shared_ptr<AsyncQueue<int>>> waiting;  // guarded by mu
  bool released = false;                                  // guarded by mu
  const int target;
  std::atomic<int> open{0};
  std::atomic<int> max_open{0};
};

constexpr int kEvents = 5;

HttpHandler MakeBarrierHandler(Barrier* barrier) {
  return [barrier](const HttpRequest&, HttpResponder& res) -> asio::awaitable<void> {
    auto queue = std::make_shared<AsyncQueue<int>>(res.executor());
    res.OnClientGone([queue] { queue->Close(); });
    if (!co_await res.StartSse() || !co_await res.SendSse("hello")) co_return;
    int open = ++barrier->open;
    for (int seen = barrier->max_open.load(); seen < open;) {
      barrier->max_open.compare_exchange_weak(seen, open);
    }
    {
      std::lock_guard<std::mutex> lock(barrier->mu);
      barrier->waiting.push_back(queue);
      if (!barrier->released && static_cast<int>(barrier->waiting.size()) >= barrier->target) {
        barrier->released = true;
        for (auto& q : barrier->waiting) q->Push(1);
      } else if (barrier->released) {
        queue->Push(1);
      }
    }
    if (co_await queue->Pop()) {
      for (int i = 0; i < kEvents; ++i) {
        if (!co_await res.SendSse("event " + std::to_string(i))) break;
      }
    }
    --barrier->open;
    co_await res.EndSse();
  };
}

// One client stream: connect, ask, read to EOF (Connection: close), count events.
asio::awaitable<void> RunClient(int port, std::atomic<int>* complete, std::atomic<int>* failed) {
  auto executor = co_await asio::this_coro::executor;
  asio::ip::tcp::socket socket(executor);
  boost::system::error_code ec;
  co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)},
                                asio::redirect_error(asio::use_awaitable, ec));
  std::string raw;
  if (!ec) {
    std::string request = MakeRequest("GET", "/load", {}, "Connection: close\r\n");
    co_await asio::async_write(socket, asio::buffer(request),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  char buf[4096];
  while (!ec) {
    size_t n = co_await socket.async_read_some(asio::buffer(buf),
                                               asio::redirect_error(asio::use_awaitable, ec));
    raw.append(buf, n);
  }
  testing::TestResponse response;
  size_t consumed = 0;
  bool ok = testing::ParseResponse(raw, response, consumed) == testing::ParseState::kComplete;
  auto events = testing::ParseSseEvents(response.body);
  ok = ok && events.size() == kEvents + 1 && events[0] == "hello" &&
       events[kEvents] == "event " + std::to_string(kEvents - 1);
  ++(ok ? *complete : *failed);
}

TEST(SseLoadTest, TwoThousandConcurrentStreams) {
  constexpr int kStreams = 2000;
  // Client and server sockets live in this process: two descriptors per stream plus slack.
  long limit = testing::RaiseFileLimit(2 * kStreams + 512);
  if (limit < 2 * kStreams + 256) {
    GTEST_SKIP() << "RLIMIT_NOFILE is " << limit << " and cannot be raised to "
                 << 2 * kStreams + 256;
  }
  Barrier barrier(kStreams);
  auto server = HttpServer::Start(SseOptions(), MakeBarrierHandler(&barrier));
  ASSERT_TRUE(server.ok()) << server.status();

  asio::io_context client_context(1);
  std::atomic<int> complete{0};
  std::atomic<int> failed{0};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kStreams; ++i) {
    asio::co_spawn(client_context, RunClient((*server)->port(), &complete, &failed),
                   asio::detached);
  }
  std::thread client_thread([&] { client_context.run_for(60s); });
  std::chrono::steady_clock::time_point all_open;
  while (complete + failed < kStreams && std::chrono::steady_clock::now() - t0 < 60s) {
    if (all_open == std::chrono::steady_clock::time_point() && barrier.max_open >= kStreams) {
      all_open = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(1ms);
  }
  const auto t1 = std::chrono::steady_clock::now();
  client_thread.join();
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  std::printf("[ load ] %d SSE streams: all open after %lld ms, all complete after %lld ms "
              "(%d ok, %d failed, peak %d open on 2 server threads)\n",
              kStreams, static_cast<long long>(ms(all_open - t0)),
              static_cast<long long>(ms(t1 - t0)), complete.load(), failed.load(),
              barrier.max_open.load());
  EXPECT_EQ(complete.load(), kStreams);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(barrier.max_open.load(), kStreams);
  (*server)->Stop();
  barrier.waiting.clear();  // queues must not outlive the server's io_context
}

}  // namespace
}  // namespace xserv::http
