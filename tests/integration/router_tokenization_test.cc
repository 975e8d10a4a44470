// How the router tokenises text, over xserv-fake-worker with the real Llama 3 tokenizer (whose
// post-processor puts <|begin_of_text|> first): vLLM's add_special_tokens, default true for
// completions and /tokenize of a prompt (as HF's tokenizer(text)), false for chat and /tokenize of
// messages (the template writes the BOS itself); token-id prompts are taken as given.
#include "gtest/gtest.h"
#include "tests/integration/fake_stack.h"
#include "tests/integration/http_client.h"

namespace xserv::testing {
namespace {

using nlohmann::json;

constexpr uint32_t kLlama3Bos = 128000;  // <|begin_of_text|>

class RouterTokenizationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = MakeTokenizerOnlyModel("llama3", "llama");
    if (model.empty()) return;
    stack_ = new FakeStack();
    if (!StartFakeStack(*stack_, model,
                        {"--token-interval-us", "1000", "--default-max-tokens", "4",
                         "--max-context", "1024", "--eos-ids", "128009"})) {
      delete stack_;
      stack_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  void SetUp() override {
    if (stack_ == nullptr) {
      GTEST_SKIP() << "Llama 3 tokenizer not fetched (scripts/fetch-assets.sh)";
    }
  }
  static int port() { return stack_->port(); }
  static std::vector<uint32_t> Tokenize(const json& body) {
    const HttpResult r = Post(port(), "/tokenize", body);
    EXPECT_EQ(r.status, 200) << body.dump() << " -> " << r.body;
    return r.Json().value("tokens", std::vector<uint32_t>{});
  }

  static FakeStack* stack_;
};
FakeStack* RouterTokenizationTest::stack_ = nullptr;

TEST_F(RouterTokenizationTest, TokenizeAddsTheBosToAPromptAsHfDoes) {
  const std::vector<uint32_t> with = Tokenize(json{{"prompt", "Hello world"}});
  const std::vector<uint32_t> without =
      Tokenize(json{{"prompt", "Hello world"}, {"add_special_tokens", false}});
  ASSERT_FALSE(without.empty());
  EXPECT_NE(without.front(), kLlama3Bos);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with.front(), kLlama3Bos);
  EXPECT_TRUE(std::equal(without.begin(), without.end(), with.begin() + 1));
  EXPECT_EQ(Tokenize(json{{"prompt", "Hello world"}, {"add_special_tokens", true}}), with);
}

TEST_F(RouterTokenizationTest, ChatTemplatesWriteTheirOwnBosOnce) {
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const std::vector<uint32_t> ids = Tokenize(json{{"messages", messages}});
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], kLlama3Bos);
  EXPECT_NE(ids[1], kLlama3Bos);
  // Asked for, the tokenizer's BOS comes on top of the template's, as vLLM does it.
  const std::vector<uint32_t> doubled =
      Tokenize(json{{"messages", messages}, {"add_special_tokens", true}});
  ASSERT_EQ(doubled.size(), ids.size() + 1);
  EXPECT_EQ(doubled[1], kLlama3Bos);
}

TEST_F(RouterTokenizationTest, CompletionsCountTheBosOfTextPromptsOnly) {
  const size_t with_bos = Tokenize(json{{"prompt", "Once upon a time"}}).size();
  const auto prompt_tokens = [](const json& body) {
    const HttpResult r = Post(port(), "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << body.dump() << " -> " << r.body;
    return r.Json()["usage"].value("prompt_tokens", size_t{0});
  };
  EXPECT_EQ(prompt_tokens(json{{"prompt", "Once upon a time"}, {"max_tokens", 2}}), with_bos);
  EXPECT_EQ(prompt_tokens(json{{"prompt", "Once upon a time"},
                               {"max_tokens", 2},
                               {"add_special_tokens", false}}),
            with_bos - 1);
  // Token ids go to the worker as given.
  EXPECT_EQ(prompt_tokens(json{{"prompt", json::array({9906, 1917})}, {"max_tokens", 2}}), 2u);
}

TEST_F(RouterTokenizationTest, TokenizeRefusesWhatItCannotHonour) {
  const auto status_and_param = [](const json& body) {
    const HttpResult r = Post(port(), "/tokenize", body);
    return std::make_pair(r.status, r.Json()["error"].value("param", std::string()));
  };
  EXPECT_EQ(status_and_param(json{{"prompt", "x"}, {"add_special_tokens", "x"}}),
            std::make_pair(400, std::string("add_special_tokens")));
  EXPECT_EQ(status_and_param(json{{"prompt", "x"}, {"model", "another-model"}}),
            std::make_pair(404, std::string("model")));
  EXPECT_EQ(status_and_param(
                json{{"prompt", "x"},
                     {"messages", json::array({{{"role", "user"}, {"content", "x"}}})}}),
            std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(status_and_param(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                                  {"continue_final_message", true}}),
            std::make_pair(400, std::string("continue_final_message")));
}

}  // namespace
}  // namespace xserv::testing
