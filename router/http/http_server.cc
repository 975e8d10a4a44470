#include "router/http/http_server.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/http/connection.h"
#include "spdlog/spdlog.h"

namespace xserv::http {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              HttpHandler handler) {
  RETURN_IF_ERROR(options.Validate());
  if (!handler) return absl::InvalidArgumentError("http: no handler");
  auto shared = std::make_shared<internal::ServerShared>();
  shared->options = std::move(options);
  shared->handler = std::move(handler);
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(shared)));
  RETURN_IF_ERROR(server->Listen());
  asio::co_spawn(server->acceptor_.get_executor(), server->AcceptLoop(),
                 [](std::exception_ptr e) {
                   if (!e) return;
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     spdlog::critical("http: accept loop ended: {}", ex.what());
                   }
                 });
  const int threads = server->shared_->options.threads;
  server->threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    server->threads_.emplace_back([s = server.get()] { s->io_context_.run(); });
  }
  spdlog::info("http: listening on {}:{} with {} threads", server->shared_->options.host,
               server->port_, threads);
  return server;
}

HttpServer::HttpServer(std::shared_ptr<internal::ServerShared> shared)
    : shared_(std::move(shared)),
      io_context_(shared_->options.threads),
      acceptor_(asio::make_strand(io_context_)) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Listen() {
  const HttpServerOptions& options = shared_->options;
  error_code ec;
  tcp::resolver resolver(io_context_);
  auto results = resolver.resolve(options.host, std::to_string(options.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: cannot resolve host '", options.host, "': ", ec.message()));
  }
  tcp::endpoint endpoint = results.begin()->endpoint();
  auto fail = [&](const char* what) {
    return absl::UnavailableError(absl::StrCat("http: cannot ", what, " ", options.host, ":",
                                               options.port, ": ", ec.message()));
  };
  if (acceptor_.open(endpoint.protocol(), ec)) return fail("open a socket for");
  if (acceptor_.set_option(asio::socket_base::reuse_address(true), ec)) {
    return fail("set SO_REUSEADDR on");
  }
  if (acceptor_.bind(endpoint, ec)) return fail("bind");
  if (acceptor_.listen(options.listen_backlog, ec)) return fail("listen on");
  port_ = acceptor_.local_endpoint(ec).port();
  if (ec) return fail("read the bound port of");
  return absl::OkStatus();
}

asio::awaitable<void> HttpServer::AcceptLoop() {
  const HttpServerOptions& options = shared_->options;
  for (;;) {
    error_code ec;
    tcp::socket socket = co_await acceptor_.async_accept(
        asio::any_io_executor(asio::make_strand(io_context_)),
        asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open() ||
          shared_->stopping.load()) {
        break;
      }
      // E.g. EMFILE: back off briefly instead of spinning; the connection waits in the backlog.
      spdlog::warn("http: accept failed: {}", ec.message());
      asio::steady_timer backoff(acceptor_.get_executor(), std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);  // SSE events must not wait for Nagle
    const uint64_t id = next_connection_id_++;
    const bool reject = shared_->registry.size() >= options.max_connections;
    auto connection = std::make_shared<internal::Connection>(std::move(socket), shared_, id,
                                                             /*registered=*/!reject);
    if (!reject) shared_->registry.Add(id, connection);
    connection->Start(reject);
  }
}

size_t HttpServer::num_connections() const { return shared_->registry.size(); }

bool HttpServer::WaitForConnections(std::chrono::steady_clock::duration timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (shared_->registry.size() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void HttpServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  for (const std::thread& t : threads_) XSERV_CHECK(t.get_id() != std::this_thread::get_id());

  shared_->stopping.store(true);
  asio::post(acceptor_.get_executor(), [this] {
    error_code ec;
    acceptor_.close(ec);
  });
  for (const auto& connection : shared_->registry.Snapshot()) connection->Shutdown();
  if (!WaitForConnections(shared_->options.stop_grace)) {
    spdlog::warn("http: {} connections still open after the stop grace period; closing them",
                 shared_->registry.size());
    for (const auto& connection : shared_->registry.Snapshot()) connection->ForceClose();
    if (!WaitForConnections(std::chrono::seconds(2))) {
      spdlog::warn("http: {} connections did not finish; stopping the I/O threads anyway",
                   shared_->registry.size());
    }
  }
  io_context_.stop();
  const bool was_running = !threads_.empty();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (was_running) spdlog::info("http: stopped");
}

}  // namespace xserv::http
