#include "tools/common/generation_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"

namespace xserv::tools {
namespace {

// The one translation from grpc::Status to absl::Status of the tools.
absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::string StripScheme(const std::string& address) {
  constexpr std::string_view kScheme = "grpc://";
  return address.rfind(kScheme, 0) == 0 ? address.substr(kScheme.size()) : address;
}

}  // namespace

GenerationClient::GenerationClient(const std::string& address, std::string api_key,
                                   std::chrono::seconds timeout)
    : stub_(xserv::v1::Generation::NewStub(
          grpc::CreateChannel(StripScheme(address), grpc::InsecureChannelCredentials()))),
      api_key_(std::move(api_key)),
      timeout_(timeout) {}

void GenerationClient::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  if (!api_key_.empty()) context.AddMetadata("authorization", "Bearer " + api_key_);
}

absl::StatusOr<xserv::v1::Complete> GenerationClient::Generate(
    const xserv::v1::GenerateRequest& request,
    const std::function<void(const xserv::v1::Chunk&)>& on_chunk) {
  grpc::ClientContext context;
  Prepare(context);
  auto reader = stub_->Generate(&context, request);
  xserv::v1::GenerateResponse message;
  xserv::v1::Complete complete;
  bool completed = false;
  while (reader->Read(&message)) {
    if (message.has_chunk()) {
      on_chunk(message.chunk());
    } else if (message.has_complete()) {
      complete = message.complete();
      completed = true;
    }
  }
  if (absl::Status s = FromGrpc(reader->Finish()); !s.ok()) return s;
  if (!completed) return absl::UnavailableError("the Generate stream ended without Complete");
  if (complete.finish_reason() == xserv::v1::FINISH_REASON_ERROR ||
      complete.finish_reason() == xserv::v1::FINISH_REASON_ABORT) {
    return absl::AbortedError(absl::StrCat("generation ended early: ", complete.message()));
  }
  return complete;
}

absl::StatusOr<std::vector<uint32_t>> GenerationClient::Tokenize(const std::string& text) {
  grpc::ClientContext context;
  Prepare(context);
  xserv::v1::TokenizeRequest request;
  request.set_text(text);
  xserv::v1::TokenizeResponse response;
  if (absl::Status s = FromGrpc(stub_->Tokenize(&context, request, &response)); !s.ok()) return s;
  return std::vector<uint32_t>(response.ids().begin(), response.ids().end());
}

}  // namespace xserv::tools
