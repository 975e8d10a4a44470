// The wire contracts later issues rely on: `optional` presence for sampling fields where 0 is
// meaningful, oneof framing of stream messages, and lossless round trips.
#include "gtest/gtest.h"
#include "xserv/v1/generation.pb.h"
#include "xserv/worker/v1/worker.pb.h"

namespace {

using xserv::worker::v1::GenerateRequest;
using xserv::worker::v1::GenerateResponse;

TEST(WorkerProto, ZeroTemperatureIsDistinctFromUnset) {
  GenerateRequest unset;
  unset.add_prompt_token_ids(1);
  GenerateRequest greedy = unset;
  greedy.mutable_sampling()->set_temperature(0.0f);

  GenerateRequest parsed_unset, parsed_greedy;
  ASSERT_TRUE(parsed_unset.ParseFromString(unset.SerializeAsString()));
  ASSERT_TRUE(parsed_greedy.ParseFromString(greedy.SerializeAsString()));
  EXPECT_FALSE(parsed_unset.sampling().has_temperature());
  EXPECT_TRUE(parsed_greedy.sampling().has_temperature());
  EXPECT_EQ(parsed_greedy.sampling().temperature(), 0.0f);
  EXPECT_FALSE(parsed_greedy.sampling().has_seed());
  EXPECT_FALSE(parsed_greedy.sampling().has_logprobs());
}

TEST(WorkerProto, StreamMessagesRoundTrip) {
  GenerateResponse delta;
  auto* d = delta.mutable_delta();
  d->add_token_ids(42);
  auto* lp = d->add_logprobs();
  lp->set_token_id(42);
  lp->set_logprob(-0.25f);
  lp->set_rank(1);
  auto* alt = lp->add_top();
  alt->set_token_id(7);
  alt->set_logprob(-1.5f);

  GenerateResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(delta.SerializeAsString()));
  ASSERT_EQ(parsed.kind_case(), GenerateResponse::kDelta);
  EXPECT_EQ(parsed.delta().token_ids(0), 42u);
  EXPECT_EQ(parsed.delta().logprobs(0).top(0).token_id(), 7u);
  EXPECT_FLOAT_EQ(parsed.delta().logprobs(0).top(0).logprob(), -1.5f);

  GenerateResponse fin;
  fin.mutable_finished()->set_reason(xserv::worker::v1::FINISH_REASON_STOP);
  fin.mutable_finished()->set_stop_token_id(0);  // id 0 is a real token: presence matters
  fin.mutable_finished()->set_completion_tokens(3);
  ASSERT_TRUE(parsed.ParseFromString(fin.SerializeAsString()));
  ASSERT_EQ(parsed.kind_case(), GenerateResponse::kFinished);
  EXPECT_TRUE(parsed.finished().has_stop_token_id());
  EXPECT_EQ(parsed.finished().completion_tokens(), 3u);
}

TEST(PublicProto, InputOneofAndLogitBias) {
  xserv::v1::GenerateRequest req;
  req.set_text("hello");
  req.mutable_token_ids()->add_ids(5);  // switching the oneof clears the text
  (*req.mutable_sampling()->mutable_logit_bias())[5] = -100.0f;
  req.mutable_sampling()->add_stop("\n\n");

  xserv::v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(req.SerializeAsString()));
  EXPECT_EQ(parsed.input_case(), xserv::v1::GenerateRequest::kTokenIds);
  EXPECT_TRUE(parsed.text().empty());
  EXPECT_EQ(parsed.sampling().logit_bias().at(5), -100.0f);
  EXPECT_EQ(parsed.sampling().stop(0), "\n\n");
  EXPECT_FALSE(parsed.sampling().has_skip_special_tokens());
}

}  // namespace
