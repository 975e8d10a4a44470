// A blocking client of xserv's public gRPC API (xserv.v1.Generation) for the command-line tools
// (xserv-bench, xserv-chat). One client owns one channel and may be used by many threads at once;
// every call has a deadline of the client's timeout. gRPC statuses become absl::Status here.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "xserv/v1/generation.grpc.pb.h"

namespace xserv::tools {

class GenerationClient {
 public:
  // `address` is "host:port" or "grpc://host:port"; `api_key` "" for none.
  GenerationClient(const std::string& address, std::string api_key, std::chrono::seconds timeout);

  // Runs one Generate stream, handing each Chunk to `on_chunk` as it arrives; returns the final
  // Complete. A call that fails, or completes with FINISH_REASON_ERROR / ABORT, is an error.
  absl::StatusOr<xserv::v1::Complete> Generate(
      const xserv::v1::GenerateRequest& request,
      const std::function<void(const xserv::v1::Chunk&)>& on_chunk);

  // The token ids the served model's tokenizer makes of `text` (no special tokens added).
  absl::StatusOr<std::vector<uint32_t>> Tokenize(const std::string& text);

 private:
  void Prepare(grpc::ClientContext& context) const;

  std::unique_ptr<xserv::v1::Generation::Stub> stub_;
  const std::string api_key_;
  const std::chrono::seconds timeout_;
};

}  // namespace xserv::tools
