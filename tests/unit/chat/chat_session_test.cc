// xserv-chat's conversation logic (commands, history in requests, dropping an unanswered turn)
// and the SSE reader it streams through.
#include "tools/chat/chat_session.h"
#include "tools/common/http_client.h"

#include "gtest/gtest.h"

namespace xserv::tools {
namespace {

using Action = ChatSession::Action;

TEST(ChatSession, CommandsAndTurns) {
  ChatSession s("be brief");
  EXPECT_EQ(s.HandleLine("   "), Action::kNothing);
  EXPECT_EQ(s.HandleLine("hello"), Action::kSend);
  s.AddAnswer("hi!");
  EXPECT_EQ(s.HandleLine("  how are you?  "), Action::kSend);
  const nlohmann::json r = s.Request("m", 16, 0.5);
  ASSERT_EQ(r["messages"].size(), 4u);
  EXPECT_EQ(r["messages"][0]["role"], "system");
  EXPECT_EQ(r["messages"][1]["content"], "hello");
  EXPECT_EQ(r["messages"][2]["role"], "assistant");
  EXPECT_EQ(r["messages"][3]["content"], "how are you?");
  EXPECT_EQ(r["model"], "m");
  EXPECT_TRUE(r["stream"].get<bool>());
  EXPECT_TRUE(r["stream_options"]["include_usage"].get<bool>());

  s.DropUnanswered();  // the request failed: the turn goes, the answered one stays
  EXPECT_EQ(s.num_messages(), 2u);
  EXPECT_EQ(s.HandleLine("/system"), Action::kSystemSet);  // empty: removes it
  EXPECT_EQ(s.Request("", 16, 0.5)["messages"].size(), 2u);
  EXPECT_FALSE(s.Request("", 16, 0.5).contains("model"));
  EXPECT_EQ(s.HandleLine("/clear"), Action::kCleared);
  EXPECT_EQ(s.num_messages(), 0u);
  EXPECT_EQ(s.HandleLine("/help"), Action::kHelp);
  EXPECT_EQ(s.HandleLine("/nope"), Action::kUnknownCommand);
  EXPECT_EQ(s.HandleLine("/quit"), Action::kExit);
  EXPECT_EQ(s.HandleLine("/exit"), Action::kExit);
}

}  // namespace
}  // namespace xserv::tools

namespace xserv::tools {
namespace {

// SSE payloads come out whole whatever the chunking of the byte stream.
TEST(SseReader, ReassemblesDataLinesAcrossChunks) {
  const std::string stream =
      "data: {\"a\":1}\r\n\r\n: comment\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
  for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    SseReader reader;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += chunk) {
      for (std::string& d : reader.Feed(std::string_view(stream).substr(i, chunk))) {
        got.push_back(std::move(d));
      }
    }
    ASSERT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"})) << chunk;
  }
}

}  // namespace
}  // namespace xserv::tools
