// BenchTarget over xserv's public gRPC API: Generate with token-id or text input, one token event
// per streamed Chunk that carries token ids; usage from the final Complete; token counts from the
// Tokenize RPC.
#include <utility>

#include "tools/bench/bench_target.h"
#include "tools/common/generation_client.h"

namespace xserv::tools {
namespace {

class GrpcTarget final : public BenchTarget {
 public:
  explicit GrpcTarget(const TargetOptions& options)
      : options_(options), client_(options.url, options.api_key, options.timeout) {}

  RequestTiming Send(const BenchPrompt& prompt) override {
    xserv::v1::GenerateRequest request;
    if (!options_.model.empty()) request.set_model(options_.model);
    if (prompt.text.empty()) {
      for (int id : prompt.token_ids) request.mutable_token_ids()->add_ids(static_cast<uint32_t>(id));
    } else {
      request.set_text(prompt.text);
    }
    xserv::v1::SamplingParams& sampling = *request.mutable_sampling();
    sampling.set_temperature(0);
    sampling.set_max_tokens(static_cast<uint32_t>(prompt.output_len));
    sampling.set_ignore_eos(options_.ignore_eos);
    StreamTimer timer;
    int streamed_tokens = 0;
    auto complete = client_.Generate(request, [&](const xserv::v1::Chunk& chunk) {
      if (chunk.token_ids().empty()) return;
      streamed_tokens += chunk.token_ids_size();
      timer.Event();
    });
    if (complete.ok()) {
      timer.timing().output_tokens = static_cast<int>(complete->usage().completion_tokens());
      timer.timing().prompt_tokens = static_cast<int>(complete->usage().prompt_tokens());
    }
    RequestTiming t = timer.Finish(complete.ok());
    if (t.ok && t.output_tokens == 0) t.output_tokens = streamed_tokens;
    return t;
  }

  absl::StatusOr<int> CountTokens(const std::string& text) override {
    auto ids = client_.Tokenize(text);
    if (!ids.ok()) return ids.status();
    return static_cast<int>(ids->size());
  }

 private:
  const TargetOptions options_;
  GenerationClient client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BenchTarget>> MakeGrpcTarget(const TargetOptions& options) {
  if (options.url.rfind("http://", 0) == 0) {
    return absl::InvalidArgumentError("--backend grpc takes host:port (or grpc://host:port)");
  }
  return std::make_unique<GrpcTarget>(options);
}

}  // namespace xserv::tools
