// The router's start and stop, over xserv-fake-worker. Drain (SIGTERM), at 20 ms per token: a
// request that ends within --drain-timeout-s completes; a new one gets 503 meanwhile; the
// requests still running at the deadline end with an error (an SSE error event then [DONE]; a
// 503 OpenAI error; gRPC UNAVAILABLE) rather than a cut connection, and the router exits 0 a few
// seconds later. Start: flags that could only make it wait forever or misbehave are refused at
// once, and a chat template that does not load fails chat requests with its error.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/fake_stack.h"
#include "tests/integration/http_client.h"
#include "xserv/v1/generation.grpc.pb.h"

namespace xserv::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

json Chat(int max_tokens, bool stream) {
  return json{{"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
              {"max_tokens", max_tokens},
              {"ignore_eos", true},
              {"stream", stream}};
}

// A gRPC Generate of `max_tokens` ids; returns the stream's final status and its token count.
std::pair<grpc::Status, int> GrpcGenerate(int port, int max_tokens) {
  auto stub = xserv::v1::Generation::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  xserv::v1::GenerateRequest request;
  request.set_text("Hello");
  request.mutable_sampling()->set_max_tokens(max_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, request);
  xserv::v1::GenerateResponse msg;
  int tokens = 0;
  while (reader->Read(&msg)) {
    if (msg.has_chunk()) tokens += msg.chunk().token_ids_size();
  }
  return {reader->Finish(), tokens};
}

TEST(RouterDrain, UnfinishedRequestsEndWithAnErrorAtTheDeadline) {
  const std::string model = MakeTokenizerOnlyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  const std::string grpc_port_file = MakeTempDir() + "/grpc-port";
  FakeStack stack;
  ASSERT_TRUE(StartFakeStack(
      stack, model,
      {"--token-interval-us", "20000", "--max-context", "8192", "--eos-ids", "151645,151643"},
      {"--drain-timeout-s", "3", "--grpc-port", "0", "--grpc-port-file", grpc_port_file}));
  int grpc_port = 0;
  std::ifstream(grpc_port_file) >> grpc_port;
  ASSERT_GT(grpc_port, 0);
  const int port = stack.port();

  // 2,000 tokens take 40 s: far past the drain timeout. 20 tokens take 0.4 s: well inside it.
  auto long_stream = std::async(
      std::launch::async, [&] { return Post(port, "/v1/chat/completions", Chat(2000, true)); });
  auto long_plain = std::async(
      std::launch::async, [&] { return Post(port, "/v1/chat/completions", Chat(2000, false)); });
  auto long_grpc = std::async(std::launch::async, [&] { return GrpcGenerate(grpc_port, 2000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto short_stream = std::async(
      std::launch::async, [&] { return Post(port, "/v1/chat/completions", Chat(20, true)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto term_at = Clock::now();
  auto stopped = std::async(std::launch::async, [&] { return stack.router.Stop(SIGTERM); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  const HttpResult refused = Post(port, "/v1/chat/completions", Chat(5, false));
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("shutting down"), std::string::npos) << refused.body;

  const HttpResult finished = short_stream.get();
  EXPECT_EQ(finished.status, 200);
  std::vector<std::string> data = finished.SseData();
  ASSERT_GE(data.size(), 2u) << finished.body;
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(json::parse(data[data.size() - 2])["choices"][0]["finish_reason"], "length")
      << finished.body;

  // At the deadline: an error event, then [DONE].
  const HttpResult cut = long_stream.get();
  EXPECT_EQ(cut.status, 200);
  data = cut.SseData();
  ASSERT_GE(data.size(), 3u) << cut.body;
  EXPECT_EQ(data.back(), "[DONE]") << cut.body;
  const json error = json::parse(data[data.size() - 2], nullptr, false);
  ASSERT_TRUE(error.contains("error")) << cut.body;
  EXPECT_NE(error["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);
  EXPECT_EQ(error["error"]["type"], "server_error");

  const HttpResult plain = long_plain.get();
  EXPECT_EQ(plain.status, 503) << plain.body;
  EXPECT_NE(plain.body.find("drain timeout"), std::string::npos) << plain.body;

  const auto [grpc_status, grpc_tokens] = long_grpc.get();
  EXPECT_EQ(grpc_status.error_code(), grpc::StatusCode::UNAVAILABLE) << grpc_status.error_message();
  EXPECT_GT(grpc_tokens, 0);

  EXPECT_EQ(stopped.get(), 0) << stack.Logs();
  // 3 s of drain, then the errors and the servers' stop: nowhere near a 5 s margin's end.
  const double stop_s = std::chrono::duration<double>(Clock::now() - term_at).count();
  EXPECT_LT(stop_s, 7.0) << stack.Logs();
  EXPECT_EQ(stack.worker.Stop(SIGTERM), 0);
}

// The router refuses to start (a non-zero exit within 20 s), having logged `message`.
void ExpectRefused(const std::vector<std::string>& args, const std::string& message) {
  std::string log;
  EXPECT_TRUE(StartIsRefused("xserv-router", args, &log, std::chrono::seconds(20))) << log;
  EXPECT_NE(log.find(message), std::string::npos) << log;
}

TEST(RouterStart, RefusesFlagsItCannotServeWith) {
  const std::string model = MakeTokenizerOnlyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  // Each would have had the router wait for a replica that can never answer.
  ExpectRefused({"--model", model, "--workers", "foo"}, "'foo' is not a replica leader address");
  ExpectRefused({"--model", model, "--workers", "127.0.0.1:0"}, "is not a replica leader");
  ExpectRefused({"--model", model, "--workers", "::1:50100"}, "is not a replica leader");
  // NaN passes CLI11's Range; it would make the drain deadline undefined.
  ExpectRefused({"--model", model, "--workers", "127.0.0.1:1", "--drain-timeout-s", "nan"},
                "--drain-timeout-s");
  ExpectRefused({"--model", model, "--workers", "127.0.0.1:1", "--http-threads", "0"},
                "--http-threads");
}

TEST(RouterStart, AChatTemplateThatDoesNotLoadFailsChatWithItsError) {
  const std::string model = MakeTokenizerOnlyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  std::ofstream(model + "/chat_template.jinja") << "{% for m in messages %}{{ m.content }";
  FakeStack stack;
  ASSERT_TRUE(StartFakeStack(
      stack, model,
      {"--token-interval-us", "1000", "--max-context", "1024", "--eos-ids", "151645,151643"}));
  EXPECT_NE(stack.router.Log().find("does not load"), std::string::npos) << stack.Logs();
  const HttpResult chat = Post(stack.port(), "/v1/chat/completions", Chat(4, false));
  EXPECT_EQ(chat.status, 500) << chat.body;
  EXPECT_EQ(chat.Json()["error"]["type"], "server_error") << chat.body;
  EXPECT_NE(chat.body.find("chat template does not load"), std::string::npos) << chat.body;
  const HttpResult completion =
      Post(stack.port(), "/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 4}});
  EXPECT_EQ(completion.status, 200) << completion.body;
}

}  // namespace
}  // namespace xserv::testing
