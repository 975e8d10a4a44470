// A blocking test client for xserv.worker.v1.Worker: one Generate stream collected into a struct.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::testing {

namespace wv1 = xserv::worker::v1;

struct GenerateOutcome {
  grpc::Status status;
  std::vector<uint32_t> tokens;
  std::vector<wv1::PositionLogprobs> logprobs;
  std::vector<wv1::PositionLogprobs> prompt_logprobs;
  int num_messages = 0;
  bool has_finished = false;
  wv1::Finished finished;
};

inline std::unique_ptr<wv1::Worker::Stub> WorkerStub(const std::string& address) {
  return wv1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

inline wv1::GenerateRequest GreedyRequest(const std::string& id, std::vector<uint32_t> prompt,
                                          uint32_t max_tokens) {
  wv1::GenerateRequest r;
  r.set_request_id(id);
  for (uint32_t t : prompt) r.add_prompt_token_ids(t);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

// Reads the whole stream; with cancel_after > 0, cancels once that many tokens arrived.
inline GenerateOutcome Generate(wv1::Worker::Stub& stub, const wv1::GenerateRequest& request,
                                int cancel_after = 0) {
  GenerateOutcome out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub.Generate(&ctx, request);
  wv1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    ++out.num_messages;
    if (msg.has_delta()) {
      for (uint32_t t : msg.delta().token_ids()) out.tokens.push_back(t);
      for (const auto& lp : msg.delta().logprobs()) out.logprobs.push_back(lp);
      for (const auto& lp : msg.delta().prompt_logprobs()) out.prompt_logprobs.push_back(lp);
      if (cancel_after > 0 && static_cast<int>(out.tokens.size()) >= cancel_after) {
        ctx.TryCancel();
      }
    } else if (msg.has_finished()) {
      out.has_finished = true;
      out.finished = msg.finished();
    }
  }
  out.status = reader->Finish();
  return out;
}

}  // namespace xserv::testing
