// A real gRPC server-streaming round trip on loopback with the callback API, the pattern the
// worker service follows: one reactor per stream, one write in flight, OnDone deletes.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/grpc/server.h"
#include "gtest/gtest.h"
#include "xserv/worker/v1/worker.grpc.pb.h"

namespace {

namespace wv1 = xserv::worker::v1;

// Streams one delta per prompt token (echo), then Finished.
class EchoWorker final : public wv1::Worker::CallbackService {
  class EchoReactor final : public grpc::ServerWriteReactor<wv1::GenerateResponse> {
   public:
    explicit EchoReactor(const wv1::GenerateRequest& request) {
      for (uint32_t id : request.prompt_token_ids()) {
        wv1::GenerateResponse msg;
        msg.mutable_delta()->add_token_ids(id);
        pending_.push_back(std::move(msg));
      }
      wv1::GenerateResponse fin;
      fin.mutable_finished()->set_reason(wv1::FINISH_REASON_LENGTH);
      fin.mutable_finished()->set_completion_tokens(request.prompt_token_ids_size());
      pending_.push_back(std::move(fin));
      WriteNext();
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      WriteNext();
    }
    void OnDone() override { delete this; }

   private:
    void WriteNext() {
      if (next_ == pending_.size()) return Finish(grpc::Status::OK);
      StartWrite(&pending_[next_++]);
    }
    std::vector<wv1::GenerateResponse> pending_;
    size_t next_ = 0;
  };

 public:
  grpc::ServerWriteReactor<wv1::GenerateResponse>* Generate(
      grpc::CallbackServerContext*, const wv1::GenerateRequest* request) override {
    return new EchoReactor(*request);
  }
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const wv1::HealthRequest*,
                                   wv1::HealthResponse* response) override {
    response->set_state(wv1::HealthResponse::STATE_SERVING);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

TEST(GrpcLoopback, HealthAndServerStream) {
  EchoWorker service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = wv1::Worker::NewStub(channel);

  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    wv1::HealthResponse health;
    ASSERT_TRUE(stub->Health(&ctx, wv1::HealthRequest(), &health).ok());
    EXPECT_EQ(health.state(), wv1::HealthResponse::STATE_SERVING);
  }

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  wv1::GenerateRequest request;
  for (uint32_t id : {11u, 22u, 33u}) request.add_prompt_token_ids(id);
  auto reader = stub->Generate(&ctx, request);
  std::vector<uint32_t> got;
  wv1::GenerateResponse msg;
  int finished = 0;
  while (reader->Read(&msg)) {
    if (msg.has_delta()) {
      EXPECT_EQ(finished, 0) << "no delta may follow Finished";
      for (uint32_t id : msg.delta().token_ids()) got.push_back(id);
    } else {
      ++finished;
      EXPECT_EQ(msg.finished().completion_tokens(), 3u);
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, (std::vector<uint32_t>{11, 22, 33}));
  EXPECT_EQ(finished, 1);
  server->Shutdown();
}

// A port one server listens on is refused to a second (gRPC would otherwise share it through
// SO_REUSEPORT and split connections between the two); the first keeps serving.
TEST(GrpcLoopback, SecondServerOnAServedPortIsRefused) {
  EchoWorker first_service, second_service;
  auto first = xserv::StartGrpcServer("127.0.0.1", 0, {&first_service});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = xserv::StartGrpcServer("127.0.0.1", first->port, {&second_service});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string(first->port)), std::string::npos)
      << second.status();
  auto stub = wv1::Worker::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(first->port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  wv1::HealthResponse health;
  EXPECT_TRUE(stub->Health(&ctx, wv1::HealthRequest(), &health).ok());
  first->server->Shutdown();
}

}  // namespace
