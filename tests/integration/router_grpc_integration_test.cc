// The router's public gRPC API (xserv.v1.Generation) over a real CPU worker, both real processes,
// a tiny Qwen3 with the real Qwen3 tokenizer: Generate with text and with token ids streams the
// same text as HTTP /v1/completions, usage arithmetic, stop strings never streamed, prompt
// logprobs equal to the worker's, validation errors and codes, cancellation freeing the worker's
// KV, Tokenize / ModelInfo / Health, the API key, and admission shared with HTTP.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/http_client.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"
#include "tests/integration/worker_client.h"
#include "xserv/v1/generation.grpc.pb.h"

namespace xserv::testing {
namespace {

using nlohmann::json;
namespace v1 = xserv::v1;

// A router with its gRPC port on a free port; returns that port (0 on failure).
int StartRouter(ChildProcess& router, const std::string& model, const std::string& worker,
                std::vector<std::string> extra = {}) {
  const std::string port_file = MakeTempDir() + "/grpc-port";
  std::vector<std::string> args = {"--model",     model, "--workers",        worker,
                                   "--grpc-port", "0",   "--grpc-port-file", port_file};
  args.insert(args.end(), extra.begin(), extra.end());
  if (!router.StartServer("xserv-router", args)) return 0;
  int port = 0;
  std::ifstream(port_file) >> port;  // written before the HTTP port file
  return port;
}

std::unique_ptr<v1::Generation::Stub> GenerationStub(int port) {
  return v1::Generation::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

struct Stream {
  grpc::Status status;
  std::string text;
  std::vector<uint32_t> token_ids;
  std::vector<v1::Chunk> chunks;
  int num_complete = 0;
  bool complete_last = false;
  v1::Complete complete;
  std::vector<std::string> request_ids;
};

// Reads a whole Generate stream; with cancel_after > 0, cancels once that many tokens arrived;
// `on_chunk` (optional) sees the token count after each chunk.
Stream Collect(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
               const std::string& api_key = "", int cancel_after = 0,
               const std::function<void(size_t)>& on_chunk = nullptr) {
  Stream out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    out.request_ids.push_back(msg.request_id());
    out.complete_last = msg.has_complete();
    if (msg.has_chunk()) {
      out.text += msg.chunk().text();
      out.token_ids.insert(out.token_ids.end(), msg.chunk().token_ids().begin(),
                           msg.chunk().token_ids().end());
      out.chunks.push_back(msg.chunk());
      if (cancel_after > 0 && static_cast<int>(out.token_ids.size()) >= cancel_after) {
        ctx.TryCancel();
      }
      if (on_chunk) on_chunk(out.token_ids.size());
    } else if (msg.has_complete()) {
      ++out.num_complete;
      out.complete = msg.complete();
    }
  }
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest Greedy(const std::string& text, uint32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

class RouterGrpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = SharedQwen3TinyModel();
    if (model_.empty()) return;
    worker_ = new ChildProcess();
    ASSERT_TRUE(worker_->StartServer(
        "xserv-worker", {"--model", model_, "--kv-cache-memory", "0.25", "--swap-space-gb", "0"}))
        << worker_->Log();
    router_ = new ChildProcess();
    grpc_port_ = StartRouter(*router_, model_, worker_->address());
    ASSERT_GT(grpc_port_, 0) << router_->Log();
    stub_ = GenerationStub(grpc_port_).release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    stub_ = nullptr;
    if (router_) {
      EXPECT_EQ(router_->Stop(SIGTERM), 0) << router_->Log();
    }
    if (worker_) {
      EXPECT_EQ(worker_->Stop(SIGTERM), 0) << worker_->Log();
    }
    delete router_;
    delete worker_;
    router_ = worker_ = nullptr;
  }
  void SetUp() override {
    if (model_.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  }
  void TearDown() override {
    if (HasFailure() && router_) std::cerr << router_->Log().substr(0, 8000);
  }
  static int http_port() { return router_->port(); }
  static v1::Generation::Stub& stub() { return *stub_; }
  static std::string model_;
  static ChildProcess* worker_;
  static ChildProcess* router_;
  static int grpc_port_;
  static v1::Generation::Stub* stub_;
};
std::string RouterGrpcTest::model_;
ChildProcess* RouterGrpcTest::worker_ = nullptr;
ChildProcess* RouterGrpcTest::router_ = nullptr;
int RouterGrpcTest::grpc_port_ = 0;
v1::Generation::Stub* RouterGrpcTest::stub_ = nullptr;

TEST_F(RouterGrpcTest, GenerateTextStreamsWhatHttpCompletionsReturns) {
  const json http = Post(http_port(), "/v1/completions",
                         json{{"prompt", "The quick brown fox"},
                              {"max_tokens", 20},
                              {"temperature", 0},
                              {"ignore_eos", true}})
                        .Json();
  v1::GenerateRequest req = Greedy("The quick brown fox", 20);
  req.mutable_sampling()->set_ignore_eos(true);
  req.set_request_id("my-request");
  const Stream s = Collect(stub(), req);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_GE(s.chunks.size(), 1u);
  EXPECT_EQ(s.text, http["choices"][0]["text"]);
  EXPECT_EQ(s.num_complete, 1);
  EXPECT_TRUE(s.complete_last);
  for (const std::string& id : s.request_ids) EXPECT_EQ(id, "my-request");
  EXPECT_EQ(s.complete.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(s.token_ids.size(), 20u);
  const v1::Usage& u = s.complete.usage();
  EXPECT_EQ(u.completion_tokens(), 20u);
  EXPECT_EQ(u.prompt_tokens(), http["usage"]["prompt_tokens"].get<uint32_t>());
  EXPECT_EQ(u.total_tokens(), u.prompt_tokens() + u.completion_tokens());
}

TEST_F(RouterGrpcTest, GenerateTokenIdsAndGeneratedRequestId) {
  const json tok = Post(http_port(), "/tokenize", json{{"prompt", "Once upon a time"}}).Json();
  const std::vector<uint32_t> ids = tok["tokens"].get<std::vector<uint32_t>>();
  const json http = Post(http_port(), "/v1/completions",
                         json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}})
                        .Json();
  v1::GenerateRequest req;
  req.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_max_tokens(12);
  const Stream s = Collect(stub(), req);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.text, http["choices"][0]["text"]);
  EXPECT_EQ(s.complete.usage().prompt_tokens(), ids.size());
  EXPECT_EQ(s.complete.usage().completion_tokens(), http["usage"]["completion_tokens"]);
  EXPECT_EQ(s.token_ids.size(), s.complete.usage().completion_tokens());
  ASSERT_FALSE(s.request_ids.empty());
  EXPECT_FALSE(s.request_ids[0].empty());  // generated
  for (const std::string& id : s.request_ids) EXPECT_EQ(id, s.request_ids[0]);
}

TEST_F(RouterGrpcTest, StopStringIsNeverStreamed) {
  v1::GenerateRequest req = Greedy("The quick brown fox", 24);
  req.mutable_sampling()->set_ignore_eos(true);
  const std::string full = Collect(stub(), req).text;
  ASSERT_GE(full.size(), 12u);
  const std::string stop = full.substr(4, 6);  // spans several tokens
  req.mutable_sampling()->add_stop(stop);
  const Stream s = Collect(stub(), req);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  // Everything streamed is in s.text: a partial stop string sent early would show here.
  EXPECT_EQ(s.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(s.complete.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(s.complete.stop_reason(), stop);
  const json http = Post(http_port(), "/v1/completions",
                         json{{"prompt", "The quick brown fox"},
                              {"max_tokens", 24},
                              {"temperature", 0},
                              {"ignore_eos", true},
                              {"stop", {stop}}})
                        .Json();
  EXPECT_EQ(s.text, http["choices"][0]["text"]);
  EXPECT_EQ(s.complete.usage().completion_tokens(), http["usage"]["completion_tokens"]);
}

TEST_F(RouterGrpcTest, PromptLogprobsEqualTheWorkersAndLogprobsCarryText) {
  v1::GenerateRequest req = Greedy("Once upon a time there was", 4);
  req.mutable_sampling()->set_prompt_logprobs(2);
  req.mutable_sampling()->set_logprobs(1);
  const Stream s = Collect(stub(), req);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_FALSE(s.chunks.empty());
  const json tok =
      Post(http_port(), "/tokenize", json{{"prompt", "Once upon a time there was"}}).Json();
  const std::vector<uint32_t> ids = tok["tokens"].get<std::vector<uint32_t>>();
  auto worker = WorkerStub(worker_->address());
  wv1::GenerateRequest direct_req = GreedyRequest("grpc-prompt-logprobs", ids, 1);
  direct_req.mutable_sampling()->set_prompt_logprobs(2);
  const GenerateOutcome direct = Generate(*worker, direct_req);
  ASSERT_EQ(direct.prompt_logprobs.size(), ids.size() - 1);
  const auto& prompt = s.chunks[0].prompt_logprobs();
  ASSERT_EQ(static_cast<size_t>(prompt.size()), ids.size() - 1);
  for (int i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(prompt[i].token_id(), ids[i + 1]);
    EXPECT_FLOAT_EQ(prompt[i].logprob(), direct.prompt_logprobs[i].logprob());
    EXPECT_EQ(prompt[i].top_size(), direct.prompt_logprobs[i].top_size());
    EXPECT_FALSE(prompt[i].text().empty());
  }
  for (size_t c = 1; c < s.chunks.size(); ++c) EXPECT_EQ(s.chunks[c].prompt_logprobs_size(), 0);
  std::vector<v1::PositionLogprobs> logprobs;
  for (const v1::Chunk& c : s.chunks) {
    EXPECT_EQ(c.logprobs_size(), c.token_ids_size());
    logprobs.insert(logprobs.end(), c.logprobs().begin(), c.logprobs().end());
  }
  ASSERT_EQ(logprobs.size(), s.token_ids.size());
  for (size_t i = 0; i < logprobs.size(); ++i) {
    EXPECT_EQ(logprobs[i].token_id(), s.token_ids[i]);
    EXPECT_FALSE(logprobs[i].text().empty());
    ASSERT_GE(logprobs[i].top_size(), 1);
    EXPECT_EQ(logprobs[i].top(0).token_id(), s.token_ids[i]);  // greedy: the best one
  }
}

TEST_F(RouterGrpcTest, InvalidRequestsAreInvalidArgumentAndWrongModelIsNotFound) {
  auto expect = [&](const v1::GenerateRequest& req, grpc::StatusCode code,
                    const std::string& word) {
    const Stream s = Collect(stub(), req);
    EXPECT_EQ(s.status.error_code(), code)
        << req.ShortDebugString() << " -> " << s.status.error_message();
    EXPECT_NE(s.status.error_message().find(word), std::string::npos) << s.status.error_message();
    EXPECT_TRUE(s.chunks.empty());
    EXPECT_EQ(s.num_complete, 0);
  };
  v1::GenerateRequest r = Greedy("x", 4);
  r.mutable_sampling()->set_temperature(7);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "temperature");
  r = Greedy("x", 4);
  r.mutable_sampling()->set_top_p(0);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "top_p");
  r = Greedy("x", 100000);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "context length");
  r = Greedy("x", 4);
  r.mutable_sampling()->add_stop("");
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "stop");
  r = Greedy("x", 4);
  r.mutable_sampling()->set_prompt_logprobs(50);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "prompt_logprobs");
  r = Greedy("x", 4);
  r.clear_text();
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "token_ids");
  r = Greedy("", 4);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "empty");
  r = Greedy("x", 4);
  r.mutable_token_ids()->add_ids(1u << 30);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "vocabulary");
  r.mutable_token_ids()->add_ids(3000000000u);  // beyond the HTTP parser's int32 ids
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "vocabulary");
  r = Greedy("x", 0);  // no echo in this API: not the HTTP wording
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "between 1 and");
  r = Greedy("x", 3000000000u);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "between 1 and");
  r = Greedy("x", 4);
  r.set_model("gpt-9");
  expect(r, grpc::StatusCode::NOT_FOUND, "gpt-9");
  r = Greedy("x", 4);
  r.set_model("qwen3-tiny");
  EXPECT_TRUE(Collect(stub(), r).status.ok());  // and the router still serves
}

TEST_F(RouterGrpcTest, CancellationFreesTheWorkersKv) {
  v1::GenerateRequest req = Greedy("Write forever", 3000);
  req.mutable_sampling()->set_ignore_eos(true);
  const Stream s = Collect(stub(), req, "", /*cancel_after=*/8);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_GE(s.token_ids.size(), 8u);
  EXPECT_LT(s.token_ids.size(), 3000u);
  auto worker = WorkerStub(worker_->address());
  wv1::LoadResponse load;
  for (int i = 0; i < 300; ++i) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(worker->Load(&ctx, wv1::LoadRequest(), &load).ok());
    if (load.num_running() == 0 && load.kv_blocks_free() == load.kv_blocks_total()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(load.num_running(), 0u);
  EXPECT_EQ(load.kv_blocks_free(), load.kv_blocks_total());
}

TEST_F(RouterGrpcTest, TokenizeModelInfoHealth) {
  grpc::ClientContext tctx;
  v1::TokenizeRequest treq;
  treq.set_text("Hello, world! <|im_start|>user");
  v1::TokenizeResponse tres;
  ASSERT_TRUE(stub().Tokenize(&tctx, treq, &tres).ok());
  const json http = Post(http_port(), "/tokenize", json{{"prompt", treq.text()}}).Json();
  EXPECT_EQ(std::vector<uint32_t>(tres.ids().begin(), tres.ids().end()),
            http["tokens"].get<std::vector<uint32_t>>());
  EXPECT_EQ(tres.max_context(), http["max_model_len"].get<uint32_t>());

  grpc::ClientContext mctx;
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub().ModelInfo(&mctx, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model(), "qwen3-tiny");
  EXPECT_EQ(info.model_type(), "qwen3");
  EXPECT_EQ(info.max_context(), tres.max_context());
  EXPECT_GT(info.vocab_size(), 150000u);
  EXPECT_EQ(info.num_replicas(), 1u);
  EXPECT_EQ(info.num_replicas_ready(), 1u);

  grpc::ClientContext hctx;
  v1::HealthResponse health;
  ASSERT_TRUE(stub().Health(&hctx, v1::HealthRequest(), &health).ok());
  EXPECT_TRUE(health.ready()) << health.detail();
}

TEST(RouterGrpcAdmission, ApiKeyIsEnforcedAndOverloadIsResourceExhausted) {
  const std::string model = SharedQwen3TinyModel();
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched";
  ChildProcess worker, router;
  ASSERT_TRUE(worker.StartServer(
      "xserv-worker", {"--model", model, "--kv-cache-memory", "0.25", "--swap-space-gb", "0"}));
  const int port = StartRouter(
      router, model, worker.address(),
      {"--max-concurrent-requests", "1", "--max-queued-requests", "0", "--api-key", "sekret"});
  ASSERT_GT(port, 0) << router.Log();
  auto stub = GenerationStub(port);
  EXPECT_EQ(Collect(*stub, Greedy("x", 2)).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Collect(*stub, Greedy("x", 2), "wrong").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Collect(*stub, Greedy("x", 2), "sekret").status.ok());
  {
    grpc::ClientContext ctx;
    v1::TokenizeResponse res;
    EXPECT_EQ(stub->Tokenize(&ctx, v1::TokenizeRequest(), &res).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    v1::ModelInfoResponse res;
    EXPECT_EQ(stub->ModelInfo(&ctx, v1::ModelInfoRequest(), &res).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;  // Health needs no key
    v1::HealthResponse res;
    EXPECT_TRUE(stub->Health(&ctx, v1::HealthRequest(), &res).ok());
  }
  // One slot, no queue, shared by both APIs: a long gRPC stream makes the next gRPC call
  // RESOURCE_EXHAUSTED and the next HTTP call 429.
  v1::GenerateRequest slow = Greedy("long", 600);
  slow.mutable_sampling()->set_ignore_eos(true);
  auto busy = std::async(std::launch::async, [&] { return Collect(*stub, slow, "sekret"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Stream rejected = Collect(*stub, Greedy("x", 2), "sekret");
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << rejected.status.error_message();
  const HttpResult http =
      Post(router.port(), "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}},
           {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(http.status, 429) << http.body;
  const Stream done = busy.get();
  EXPECT_TRUE(done.status.ok()) << done.status.error_message();
  EXPECT_EQ(done.complete.usage().completion_tokens(), 600u);
  EXPECT_EQ(router.Stop(), 0) << router.Log();
  EXPECT_EQ(worker.Stop(), 0);
}

TEST(RouterGrpcFailure, WorkerDeathMidStreamEndsTheStreamWithAnError) {
  const std::string model = SharedQwen3TinyModel();
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched";
  ChildProcess worker, router;
  ASSERT_TRUE(worker.StartServer(
      "xserv-worker", {"--model", model, "--kv-cache-memory", "0.25", "--swap-space-gb", "0"}));
  const int port = StartRouter(router, model, worker.address());
  ASSERT_GT(port, 0) << router.Log();
  auto stub = GenerationStub(port);
  v1::GenerateRequest req = Greedy("Write forever", 3000);
  req.mutable_sampling()->set_ignore_eos(true);
  bool killed = false;
  const Stream s = Collect(*stub, req, "", 0, [&](size_t tokens) {
    if (tokens >= 4 && !killed) {
      killed = true;
      worker.Stop(SIGKILL);
    }
  });
  EXPECT_TRUE(killed);
  EXPECT_FALSE(s.status.ok());  // no retry after the first token: the stream fails
  EXPECT_NE(s.status.error_code(), grpc::StatusCode::CANCELLED) << s.status.error_message();
  EXPECT_EQ(s.num_complete, 0);
  EXPECT_GE(s.token_ids.size(), 4u);
  EXPECT_EQ(router.Stop(), 0) << router.Log();
}

}  // namespace
}  // namespace xserv::testing
