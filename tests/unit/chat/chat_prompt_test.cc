// xserv-chat over a text-only API: the ChatML rendering of a conversation, and <think> reasoning
// split from streamed text however the tags are cut across chunks.
#include "tools/chat/chat_prompt.h"

#include "gtest/gtest.h"
#include "tools/chat/chat_session.h"

namespace xserv::tools {
namespace {

TEST(ChatPrompt, RendersTheConversationInChatMl) {
  ChatSession session("Be brief.");
  session.HandleLine("Hi");
  session.AddAnswer("Hello!");
  session.HandleLine("Où est la baleine ?");
  EXPECT_EQ(RenderChatMl(session.Messages()),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nOù est la baleine ?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(RenderChatMl(nlohmann::json::array()), "<|im_start|>assistant\n");
}

ThinkSplitter::Pieces FeedAll(const std::vector<std::string>& chunks) {
  ThinkSplitter s;
  ThinkSplitter::Pieces all;
  for (const std::string& c : chunks) {
    const auto p = s.Feed(c);
    all.reasoning += p.reasoning;
    all.content += p.content;
  }
  const auto p = s.Flush();
  all.reasoning += p.reasoning;
  all.content += p.content;
  return all;
}

TEST(ChatPrompt, SplitsReasoningAcrossChunkBoundaries) {
  const std::string text = "<think>\nwhales are big</think>\n\nMoby-Dick. a<b <thin";
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 3) {
      const auto p = FeedAll({text.substr(0, cut1), text.substr(cut1, cut2 - cut1),
                              text.substr(cut2)});
      ASSERT_EQ(p.reasoning, "\nwhales are big") << cut1 << " " << cut2;
      ASSERT_EQ(p.content, "\n\nMoby-Dick. a<b <thin") << cut1 << " " << cut2;
    }
  }
  ThinkSplitter s;
  EXPECT_EQ(s.Feed("plain <th").content, "plain ");  // a possible tag is held back
  EXPECT_EQ(s.Feed("ree").content, "<three");
  EXPECT_EQ(FeedAll({"no tags at all"}).content, "no tags at all");
  EXPECT_EQ(FeedAll({"<think>unfinished"}).reasoning, "unfinished");
}

}  // namespace
}  // namespace xserv::tools
