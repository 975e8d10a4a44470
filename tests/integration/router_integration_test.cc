// The router over a real CPU worker, both real processes, a tiny Qwen3 with the real Qwen3
// tokenizer (made by xserv-make-model), driven over HTTP: chat and completions, streaming and
// not, usage arithmetic, stop strings across token boundaries, n=2 with seeds, echo + prompt
// logprobs against the worker, client disconnect freeing the worker's KV, overload (429), API key,
// and malformed requests.
#include <sys/wait.h>

#include <filesystem>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/http_client.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"
#include "tests/integration/worker_client.h"

namespace xserv::testing {
namespace {

using nlohmann::json;

class RouterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = SharedQwen3TinyModel();
    if (model_.empty()) return;
    worker_ = new ChildProcess();
    ASSERT_TRUE(worker_->StartServer("xserv-worker", {"--model", model_, "--kv-cache-memory",
                                                      "0.25", "--swap-space-gb", "0"}))
        << worker_->Log();
    router_ = new ChildProcess();
    ASSERT_TRUE(router_->StartServer("xserv-router", {"--model", model_, "--workers",
                                                      worker_->address()}))
        << router_->Log();
  }
  static void TearDownTestSuite() {
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
  static int port() { return router_->port(); }
  static std::string model_;
  static ChildProcess* worker_;
  static ChildProcess* router_;
};
std::string RouterTest::model_;
ChildProcess* RouterTest::worker_ = nullptr;
ChildProcess* RouterTest::router_ = nullptr;

json Chat(const std::string& text, int max_tokens) {
  return json{{"messages", json::array({{{"role", "user"}, {"content", text}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0}};
}

TEST_F(RouterTest, ChatNonStreamingHasTheOpenAiShape) {
  HttpResult r = Post(port(), "/v1/chat/completions", Chat("Hello there", 12));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.Json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "qwen3-tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  // The prompt is the rendered template: check the count against /tokenize of the same messages.
  HttpResult tok = Post(port(), "/tokenize",
                        json{{"messages", json::array({{{"role", "user"}, {"content", "Hello there"}}})}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  EXPECT_EQ(j["usage"]["prompt_tokens"], tok.Json()["count"]);
  EXPECT_EQ(j["usage"]["total_tokens"],
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
}

TEST_F(RouterTest, StreamingEqualsNonStreamingAndEndsWithUsageAndDone) {
  const json whole = Post(port(), "/v1/chat/completions", Chat("Tell me a story", 20)).Json();
  json body = Chat("Tell me a story", 20);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  HttpResult r = Post(port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.Header("Content-Type").find("text/event-stream"), std::string::npos);
  const std::vector<std::string> events = r.SseData();
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["id"], json::parse(events[0])["id"]);
    if (chunk["choices"].empty()) {  // the usage chunk, last before [DONE]
      EXPECT_EQ(i, events.size() - 2);
      EXPECT_EQ(chunk["usage"], whole["usage"]);
      continue;
    }
    const json& delta = chunk["choices"][0]["delta"];
    if (i == 0) {
      EXPECT_EQ(delta["role"], "assistant");
    }
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, "length");
}

TEST_F(RouterTest, StopStringAcrossTokensIsNeverStreamed) {
  json base = {{"prompt", "The quick brown fox"}, {"max_tokens", 24}, {"temperature", 0}};
  const std::string full = Post(port(), "/v1/completions", base).Json()["choices"][0]["text"];
  ASSERT_GE(full.size(), 12u);
  // A stop string from the middle of the output, spanning several tokens.
  const std::string stop = full.substr(4, 6);
  json with_stop = base;
  with_stop["stop"] = json::array({stop});
  const json j = Post(port(), "/v1/completions", with_stop).Json();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], stop);
  const std::string expected = full.substr(0, full.find(stop));
  EXPECT_EQ(j["choices"][0]["text"], expected);
  with_stop["stream"] = true;
  std::string streamed;
  for (const std::string& e : Post(port(), "/v1/completions", with_stop).SseData()) {
    if (e == "[DONE]") break;
    streamed += json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, expected);
}

TEST_F(RouterTest, TwoChoicesWithSeedAreReproducible) {
  json body = Chat("Pick a number", 10);
  body["temperature"] = 1.0;
  body["n"] = 2;
  body["seed"] = 42;
  const json a = Post(port(), "/v1/chat/completions", body).Json();
  const json b = Post(port(), "/v1/chat/completions", body).Json();
  ASSERT_EQ(a["choices"].size(), 2u);
  EXPECT_EQ(a["choices"][0]["index"], 0);
  EXPECT_EQ(a["choices"][1]["index"], 1);
  EXPECT_EQ(a["choices"], b["choices"]);
  EXPECT_NE(a["choices"][0]["message"]["content"], a["choices"][1]["message"]["content"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 20);
}

TEST_F(RouterTest, EchoPromptLogprobsEqualTheWorkers) {
  json body = {{"prompt", "Once upon a time there was"},
               {"max_tokens", 1}, {"echo", true}, {"logprobs", 2}, {"temperature", 0}};
  const json j = Post(port(), "/v1/completions", body).Json();
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp["token_logprobs"][0].is_null());
  const json tok = Post(port(), "/tokenize", json{{"prompt", "Once upon a time there was"}}).Json();
  const size_t n = tok["count"];
  auto stub = WorkerStub(worker_->address());
  std::vector<uint32_t> ids = tok["tokens"].get<std::vector<uint32_t>>();
  wv1::GenerateRequest req = GreedyRequest("echo-check", ids, 1);
  req.mutable_sampling()->set_prompt_logprobs(2);
  GenerateOutcome direct = Generate(*stub, req);
  ASSERT_EQ(direct.prompt_logprobs.size(), n - 1);
  for (size_t i = 1; i < n; ++i) {
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), direct.prompt_logprobs[i - 1].logprob());
  }
  EXPECT_EQ(lp["tokens"].size(), n + 1);  // prompt + the generated token
}

TEST_F(RouterTest, EchoWithZeroMaxTokensReturnsOnlyThePrompt) {
  const std::string prompt = "Once upon a time there was";
  json body = {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}};
  const json j = Post(port(), "/v1/completions", body).Json();
  ASSERT_TRUE(j.contains("choices")) << j.dump();
  EXPECT_EQ(j["choices"][0]["text"], prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  const size_t n = Post(port(), "/tokenize", json{{"prompt", prompt}}).Json()["count"];
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), n);
  EXPECT_EQ(j["usage"]["prompt_tokens"], n);
  body["echo"] = false;
  EXPECT_EQ(Post(port(), "/v1/completions", body).status, 400);
}

// Streamed completions logprobs, echo included, are the whole response's cut into chunks: the
// prompt's tokens and logprobs in the first chunk, text_offset running on across chunks.
TEST_F(RouterTest, StreamedCompletionLogprobsEqualTheWholeResponses) {
  for (int max_tokens : {6, 0}) {
    json body = {{"prompt", "Once upon a time there was"}, {"max_tokens", max_tokens},
                 {"echo", true}, {"logprobs", 1}, {"temperature", 0}};
    const json whole = Post(port(), "/v1/completions", body).Json();
    ASSERT_TRUE(whole.contains("choices")) << whole.dump();
    body["stream"] = true;
    const HttpResult r = Post(port(), "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    json streamed = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                     {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    std::string text;
    for (const std::string& event : r.SseData()) {
      if (event == "[DONE]") break;
      const json choice = json::parse(event)["choices"][0];
      text += choice["text"].get<std::string>();
      if (choice["logprobs"].is_null()) continue;
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (const json& v : choice["logprobs"][key]) streamed[key].push_back(v);
      }
    }
    const json& want = whole["choices"][0]["logprobs"];
    EXPECT_EQ(text, whole["choices"][0]["text"]) << max_tokens;
    EXPECT_GT(streamed["tokens"].size(), 3u) << max_tokens;
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
      EXPECT_EQ(streamed[key], want[key]) << key << ", max_tokens " << max_tokens;
    }
  }
}

// A matched stop_token_ids entry is vLLM's stop_reason as an integer (a stop string's is the
// string), streamed and not.
TEST_F(RouterTest, StopTokenIdIsAnIntegerStopReason) {
  json body = {{"prompt", "The quick brown fox"}, {"max_tokens", 8}, {"temperature", 0},
               {"ignore_eos", true}, {"logprobs", 0}, {"return_tokens_as_token_ids", true}};
  const json free_run = Post(port(), "/v1/completions", body).Json();
  const std::string third = free_run["choices"][0]["logprobs"]["tokens"][2];
  ASSERT_EQ(third.rfind("token_id:", 0), 0u) << third;
  const uint32_t id = static_cast<uint32_t>(std::stoul(third.substr(9)));
  body["stop_token_ids"] = json::array({id});
  const json j = Post(port(), "/v1/completions", body).Json();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << j.dump();
  EXPECT_EQ(j["choices"][0]["stop_reason"], id) << j.dump();
  EXPECT_TRUE(j["choices"][0]["stop_reason"].is_number_unsigned()) << j.dump();
  body["stream"] = true;
  json last;
  for (const std::string& event : Post(port(), "/v1/completions", body).SseData()) {
    if (event != "[DONE]") last = json::parse(event);
  }
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop") << last.dump();
  EXPECT_EQ(last["choices"][0]["stop_reason"], id) << last.dump();
  // The stop token is counted but its text is left out, unless include_stop_str_in_output (vLLM).
  std::vector<uint32_t> first;
  for (int i = 0; i < 3; ++i) {
    first.push_back(static_cast<uint32_t>(std::stoul(
        free_run["choices"][0]["logprobs"]["tokens"][i].get<std::string>().substr(9))));
  }
  const auto text_of = [&](size_t n) {
    const json ids(std::vector<uint32_t>(first.begin(), first.begin() + n));
    return Post(port(), "/detokenize", json{{"tokens", ids}}).Json()["prompt"].get<std::string>();
  };
  ASSERT_TRUE(first[0] != id && first[1] != id) << "the greedy run repeats its third token";
  EXPECT_EQ(j["choices"][0]["text"], text_of(2));
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  body["stream"] = false;
  body["include_stop_str_in_output"] = true;
  EXPECT_EQ(Post(port(), "/v1/completions", body).Json()["choices"][0]["text"], text_of(3));
}

// The assistant turn of tool calls that OpenAI clients send back has "content": null; it renders
// as "" (vLLM), here through the real Qwen3 template, which tests `'</think>' in content`.
TEST_F(RouterTest, ToolCallTurnWithNullContentIsServed) {
  json messages = json::array(
      {{{"role", "user"}, {"content", "Weather?"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls", json::array({{{"id", "c1"},
                                     {"type", "function"},
                                     {"function", {{"name", "f"}, {"arguments", "{}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}});
  const json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}});
  const HttpResult r = Post(port(), "/v1/chat/completions",
                            json{{"messages", messages},
                                 {"max_tokens", 3},
                                 {"tools", tools},
                                 {"tool_choice", "auto"}});
  EXPECT_EQ(r.status, 200) << r.body;
  const json with_null = Post(port(), "/tokenize", json{{"messages", messages}}).Json();
  messages[1]["content"] = "";
  const json with_empty = Post(port(), "/tokenize", json{{"messages", messages}}).Json();
  ASSERT_TRUE(with_null.contains("tokens")) << with_null.dump();
  EXPECT_EQ(with_null["tokens"], with_empty["tokens"]);
  messages[1].erase("content");
  EXPECT_EQ(Post(port(), "/tokenize", json{{"messages", messages}}).Json()["tokens"],
            with_empty["tokens"]);
}

TEST_F(RouterTest, ClientDisconnectFreesWorkerKv) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port())});
  json body = Chat("Write forever", 3000);
  body["stream"] = true;
  body["ignore_eos"] = true;
  const std::string payload = body.dump();
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(payload.size()) + "\r\n\r\n" + payload;
  asio::write(s, asio::buffer(request));
  char buf[4096];
  size_t got = 0;
  while (got < 2000) got += s.read_some(asio::buffer(buf));  // a few chunks
  s.close();
  auto stub = WorkerStub(worker_->address());
  wv1::LoadResponse load;
  for (int i = 0; i < 300; ++i) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Load(&ctx, wv1::LoadRequest(), &load).ok());
    if (load.num_running() == 0 && load.kv_blocks_free() == load.kv_blocks_total()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(load.num_running(), 0u);
  EXPECT_EQ(load.kv_blocks_free(), load.kv_blocks_total());
}

// A client that leaves mid-generation is the client's doing: the router counts it as finish
// reason "abort" (and, not streaming, as status 499), not as a server error (500 and "error").
TEST_F(RouterTest, AClientThatLeavesIsAnAbort) {
  namespace asio = boost::asio;
  const auto metric = [&](const std::string& series) {
    const std::string metrics = HttpCall(port(), "GET", "/metrics").body;
    const size_t at = metrics.find(series + " ");
    return at == std::string::npos ? 0.0 : std::stod(metrics.substr(at + series.size() + 1));
  };
  const std::string aborts = R"(xserv:request_success_total{finished_reason="abort"})";
  const std::string status_499 = R"(xserv:http_requests_total{status="499"})";
  const std::string status_500 = R"(xserv:http_requests_total{status="500"})";
  const double aborts_before = metric(aborts), before_499 = metric(status_499),
               before_500 = metric(status_500);
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port())});
  json body = Chat("Write forever", 3000);
  body["ignore_eos"] = true;
  const std::string payload = body.dump();
  asio::write(s, asio::buffer("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(payload.size()) + "\r\n\r\n" + payload));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // generating
  s.close();
  for (int i = 0; i < 300 && metric(status_499) == before_499; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(metric(status_499), before_499 + 1);
  EXPECT_EQ(metric(aborts), aborts_before + 1);
  EXPECT_EQ(metric(status_500), before_500);
  // Streaming: the stream is cut after its first events.
  asio::ip::tcp::socket streamed(io);
  streamed.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port())});
  body["stream"] = true;
  const std::string stream_payload = body.dump();
  asio::write(streamed,
              asio::buffer("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           "application/json\r\nContent-Length: " +
                           std::to_string(stream_payload.size()) + "\r\n\r\n" + stream_payload));
  char buf[2048];
  size_t got = 0;
  while (got < 1000) got += streamed.read_some(asio::buffer(buf));
  streamed.close();
  for (int i = 0; i < 300 && metric(aborts) == aborts_before + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no second count either
  EXPECT_EQ(metric(aborts), aborts_before + 2);
  EXPECT_EQ(metric(status_500), before_500);
}

TEST_F(RouterTest, MalformedRequestsGetOpenAiErrorsAndServingContinues) {
  auto expect_error = [&](const std::string& body, int status, const std::string& param) {
    HttpResult r = HttpCall(port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(r.status, status) << body << " -> " << r.body;
    const json j = r.Json();
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r.body;
    }
  };
  expect_error("{not json", 400, "");
  expect_error("[]", 400, "");
  expect_error(R"({"messages": "hi"})", 400, "messages");
  expect_error(R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages[0].role");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 7})", 400,
               "temperature");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", 400, "n");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000})", 400,
               "max_tokens");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-9"})", 404,
               "model");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", 400, "stop");
  expect_error(std::string(100, '[') + std::string(100, ']'), 400, "");
  // Field combinations and ranges found by a hostile-client audit (session 32): each is the
  // client's error, named, never a 500 or a silent truncation.
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  expect_error("{" + msgs + R"(, "best_of": 1, "n": "x"})", 400, "n");
  expect_error("{" + msgs + R"(, "best_of": 3, "n": 2})", 400, "best_of");
  expect_error("{" + msgs + R"(, "stop_token_ids": [4295031313]})", 400, "stop_token_ids");
  expect_error("{" + msgs + R"(, "seed": 9223372036854775808})", 400, "seed");
  expect_error("{" + msgs + R"(, "logit_bias": {" 100": 1}})", 400, "logit_bias");
  expect_error("{" + msgs + R"(, "logit_bias": {"+5": 1}})", 400, "logit_bias");
  expect_error("{" + msgs + R"(, "tool_choice": "bogus"})", 400, "tool_choice");
  expect_error("{" + msgs + R"(, "tool_choice": "required"})", 400, "tool_choice");
  expect_error("{" + msgs + R"(, "tools": [5]})", 400, "tools");
  expect_error("{" + msgs + R"(, "echo": true})", 400, "echo");
  expect_error("{" + msgs + R"(, "chat_template": "{{ 1 }}"})", 400, "chat_template");
  expect_error(R"({"messages": [{"role": "user", "content": "x"},
                                {"role": "assistant", "content": null, "tool_calls": 5}]})",
               400, "messages[1].tool_calls");
  for (const char* n : {R"("x")", "[]", "-1"}) {
    HttpResult r = HttpCall(port(), "POST", "/v1/completions",
                            std::string(R"({"prompt": "a", "best_of": 1, "n": )") + n + "}");
    EXPECT_EQ(r.status, 400) << n << " -> " << r.body;
    EXPECT_EQ(r.Json()["error"]["param"], "n") << r.body;
  }
  HttpResult suffix = Post(port(), "/v1/completions", json{{"prompt", "a"}, {"suffix", "b"}});
  EXPECT_EQ(suffix.status, 400);
  EXPECT_EQ(HttpCall(port(), "GET", "/v1/chat/completions").status, 405);
  EXPECT_EQ(HttpCall(port(), "GET", "/nope").status, 404);
  EXPECT_EQ(Post(port(), "/v1/chat/completions", Chat("still fine", 3)).status, 200);
}

TEST_F(RouterTest, HealthReadyModelsMetrics) {
  EXPECT_EQ(HttpCall(port(), "GET", "/health").status, 200);
  EXPECT_EQ(HttpCall(port(), "GET", "/ready").status, 200);
  const HttpResult head = HttpCall(port(), "HEAD", "/health");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty()) << head.body;
  EXPECT_EQ(HttpCall(port(), "HEAD", "/ready").status, 200);
  const json models = HttpCall(port(), "GET", "/v1/models").Json();
  EXPECT_EQ(models["data"][0]["id"], "qwen3-tiny");
  // OpenAI's retrieve: the list's entry by its id (percent-decoded), 404 for any other name.
  const HttpResult one = HttpCall(port(), "GET", "/v1/models/qwen3%2Dtiny");
  EXPECT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.Json(), models["data"][0]);
  const HttpResult other = HttpCall(port(), "GET", "/v1/models/Qwen%2FQwen3-8B");
  EXPECT_EQ(other.status, 404) << other.body;
  EXPECT_EQ(other.Json()["error"]["code"], "model_not_found") << other.body;
  EXPECT_NE(other.body.find("'Qwen/Qwen3-8B' does not exist"), std::string::npos) << other.body;
  EXPECT_EQ(HttpCall(port(), "GET", "/v1/models/%zz").status, 404);
  EXPECT_EQ(HttpCall(port(), "POST", "/v1/models/qwen3-tiny").status, 405);
  const HttpResult version = HttpCall(port(), "GET", "/version");  // vLLM's
  EXPECT_EQ(version.status, 200);
  EXPECT_FALSE(version.Json()["version"].get<std::string>().empty()) << version.body;
  const std::string metrics = HttpCall(port(), "GET", "/metrics").body;
  for (const char* name : {"xserv:time_to_first_token_seconds_bucket", "xserv:prompt_tokens_total",
                           "xserv:generation_tokens_total", "xserv:num_requests_running",
                           "xserv:kv_cache_usage_perc", "xserv:http_requests_total",
                           "xserv:e2e_request_latency_seconds_count"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name;
  }
  // The KV cache's configuration as an info gauge: f32 on the CPU backend, 16-token blocks.
  EXPECT_NE(metrics.find("xserv:cache_config_info{block_size=\"16\",cache_dtype=\"f32\","
                         "num_gpu_blocks=\""),
            std::string::npos)
      << metrics;
}

TEST(RouterAdmission, OverloadGets429AndApiKeyIsEnforced) {
  const std::string model = SharedQwen3TinyModel();
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched";
  ChildProcess worker, router;
  ASSERT_TRUE(worker.StartServer("xserv-worker", {"--model", model, "--kv-cache-memory", "0.25",
                                                  "--swap-space-gb", "0"}));
  ASSERT_TRUE(router.StartServer("xserv-router",
                                 {"--model", model, "--workers", worker.address(),
                                  "--max-concurrent-requests", "1", "--max-queued-requests", "0",
                                  "--api-key", "sekret"}))
      << router.Log();
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer sekret"}};
  EXPECT_EQ(Post(router.port(), "/v1/chat/completions", Chat("x", 2)).status, 401);
  EXPECT_EQ(Post(router.port(), "/v1/chat/completions", Chat("x", 2),
                 {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(Post(router.port(), "/v1/chat/completions", Chat("x", 2), auth).status, 200);
  EXPECT_EQ(HttpCall(router.port(), "GET", "/health").status, 200);  // health needs no key
  json slow = Chat("long", 600);
  slow["ignore_eos"] = true;
  auto busy = std::async(std::launch::async,
                         [&] { return Post(router.port(), "/v1/chat/completions", slow, auth); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  HttpResult rejected = Post(router.port(), "/v1/chat/completions", Chat("x", 2), auth);
  EXPECT_EQ(rejected.status, 429) << rejected.body;
  EXPECT_EQ(rejected.Header("Retry-After"), "1");
  EXPECT_EQ(busy.get().status, 200);
  EXPECT_EQ(router.Stop(), 0);
  EXPECT_EQ(worker.Stop(), 0);
}

}  // namespace
}  // namespace xserv::testing
