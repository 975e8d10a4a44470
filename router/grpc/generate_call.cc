#include "router/grpc/generate_call.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>

#include "common/grpc/status_conversion.h"
#include "router/grpc/request_conversion.h"
#include "router/server/admission.h"
#include "router/server/generation_run.h"
#include "spdlog/spdlog.h"

namespace xserv::router::grpc_api {

namespace asio = boost::asio;
namespace v1 = xserv::v1;

namespace {

// The public Chunk for one update of the (single) choice; empty when it carries nothing.
v1::Chunk ToChunk(ChoiceUpdate& u, const TokenRenderer& tokens) {
  v1::Chunk chunk;
  // Completions run no reasoning parser, so all text is content; keep reasoning if one ever runs.
  chunk.set_text(u.delta.reasoning + u.delta.content);
  chunk.mutable_token_ids()->Assign(u.delta.token_ids.begin(), u.delta.token_ids.end());
  AppendLogprobs(u.logprobs, tokens, chunk.mutable_logprobs());
  AppendLogprobs(u.prompt_logprobs, tokens, chunk.mutable_prompt_logprobs());
  return chunk;
}

bool IsEmpty(const v1::Chunk& c) {
  return c.text().empty() && c.token_ids().empty() && c.logprobs().empty() &&
         c.prompt_logprobs().empty();
}

// How the choice ended, as far as the Complete message needs it.
struct Ending {
  std::string finish_reason;
  std::optional<StopReason> stop_reason;  // GenerationRun's: a stop string or a stop token id
  std::optional<uint32_t> last_token;      // the last generated id (EOS when it ended on EOS)
};

// Complete.stop_reason: the matched stop string, or the text of the stop token (a listed
// stop_token_ids entry, or an EOS id).
std::string StopReasonText(const Ending& e, const ModelContext& model,
                           const TokenRenderer& tokens) {
  if (e.finish_reason != "stop") return "";
  if (e.stop_reason) {
    if (const auto* id = std::get_if<uint32_t>(&*e.stop_reason)) return tokens.Text(*id);
    return std::get<std::string>(*e.stop_reason);
  }
  if (e.last_token) {
    for (uint32_t eos : model.eos_token_ids) {
      if (eos == *e.last_token) return tokens.Text(eos);
    }
  }
  return "";
}

}  // namespace

class GenerateCall::Reactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit Reactor(std::shared_ptr<GenerateCall> call) : call_(std::move(call)) {}
  void OnWriteDone(bool ok) override { call_->WriteDone(ok); }
  void OnCancel() override { call_->Cancelled(); }
  void OnDone() override {
    call_->Detach();
    delete this;
  }

 private:
  std::shared_ptr<GenerateCall> call_;
};

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerateCall::Start(
    RouterState& state, asio::io_context& io, const v1::GenerateRequest& request,
    const absl::Status& refusal) {
  std::string internal_id = state.NewId("gen");
  std::string public_id = request.request_id().empty() ? internal_id : request.request_id();
  auto call = std::shared_ptr<GenerateCall>(
      new GenerateCall(state, asio::make_strand(io), std::move(public_id), std::move(internal_id)));
  auto* reactor = new Reactor(call);
  call->reactor_ = reactor;
  if (!refusal.ok()) {
    call->Close(ToGrpcStatus(refusal));
    return reactor;
  }
  asio::co_spawn(call->strand_, Run(call, request), asio::detached);
  return reactor;
}

asio::awaitable<void> GenerateCall::Run(std::shared_ptr<GenerateCall> self,
                                        v1::GenerateRequest request) {
  const absl::Status status = co_await self->Serve(request);
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    spdlog::debug("gRPC Generate {} ({}): {}", self->public_id_, self->internal_id_,
                  status.ToString());
  }
  self->Close(ToGrpcStatus(status));
}

asio::awaitable<absl::Status> GenerateCall::Serve(const v1::GenerateRequest& request) {
  const ModelContext& model = *state_.model;
  auto prepared = PrepareGenerate(request, model);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    const absl::Status invalid = ApiErrorToStatus(*e);
    co_return invalid;
  }
  Admission admission(state_);
  const std::function<bool()> gone = [this] { return cancelled(); };
  const absl::Status admitted = co_await admission.Acquire(gone);
  if (cancelled()) {
    const absl::Status cancelled_status = absl::CancelledError("cancelled by the client");
    co_return cancelled_status;
  }
  if (!admitted.ok()) co_return admitted;
  PreparedGeneration& g = std::get<PreparedGeneration>(prepared);
  const int64_t prompt_tokens = static_cast<int64_t>(g.prompts.front().ids.size());
  GenerationRun run(state_, std::move(g), internal_id_, request.priority(), strand_);
  run_ = &run;
  absl::Status status = run.Start();
  if (status.ok()) {
    if (cancelled()) run.CancelAll();  // a cancel posted before run_ was set found nothing
    state_.metrics.AddPromptTokens(prompt_tokens);
    status = co_await Stream(run, model);
    state_.metrics.AddGenerationTokens(run.usage().completion_tokens);
  }
  run_ = nullptr;  // before `run` dies; nothing can run on the strand in between
  co_return status;
}

asio::awaitable<absl::Status> GenerateCall::Stream(GenerationRun& run, const ModelContext& model) {
  const TokenRenderer tokens{model.tokenizer.get(), false};
  absl::Status error;
  Ending ending;
  while (true) {
    std::vector<ChoiceUpdate> updates = co_await run.Next();
    if (updates.empty()) break;
    for (ChoiceUpdate& u : updates) {
      if (!u.error.ok()) {
        if (error.ok()) error = u.error;
        continue;
      }
      if (!u.delta.token_ids.empty()) ending.last_token = u.delta.token_ids.back();
      if (u.finish_reason) {
        ending.finish_reason = *u.finish_reason;
        ending.stop_reason = u.stop_reason;
      }
      v1::Chunk chunk = ToChunk(u, tokens);
      if (!IsEmpty(chunk)) AppendChunk(std::move(chunk));
    }
  }
  if (cancelled()) error = absl::CancelledError("cancelled by the client");
  if (!error.ok()) co_return error;
  if (ending.finish_reason.empty()) {
    const absl::Status internal = absl::InternalError("the generation ended without a finish");
    co_return internal;
  }
  const UsageCounts usage = run.usage();
  v1::Complete complete;
  complete.set_finish_reason(ToFinishReason(ending.finish_reason));
  complete.set_stop_reason(StopReasonText(ending, model, tokens));
  v1::Usage* u = complete.mutable_usage();
  u->set_prompt_tokens(static_cast<uint32_t>(usage.prompt_tokens));
  u->set_completion_tokens(static_cast<uint32_t>(usage.completion_tokens));
  u->set_total_tokens(static_cast<uint32_t>(usage.prompt_tokens + usage.completion_tokens));
  u->set_cached_prompt_tokens(static_cast<uint32_t>(usage.cached_tokens));
  SetComplete(std::move(complete));
  co_return absl::OkStatus();
}

void GenerateCall::AppendChunk(v1::Chunk chunk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr || cancelled_) return;
    if (!has_pending_) {
      pending_.Clear();
      pending_.set_request_id(public_id_);
      *pending_.mutable_chunk() = std::move(chunk);
      has_pending_ = true;
    } else {  // coalesce behind the write in flight
      v1::Chunk* merged = pending_.mutable_chunk();
      merged->mutable_text()->append(chunk.text());
      merged->mutable_token_ids()->MergeFrom(chunk.token_ids());
      merged->mutable_logprobs()->MergeFrom(chunk.logprobs());
      merged->mutable_prompt_logprobs()->MergeFrom(chunk.prompt_logprobs());
    }
  }
  Pump();
}

void GenerateCall::SetComplete(v1::Complete complete) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr || cancelled_) return;
    complete_.emplace();
    complete_->set_request_id(public_id_);
    *complete_->mutable_complete() = std::move(complete);
  }
  Pump();
}

void GenerateCall::Close(grpc::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
  }
  Pump();
}

bool GenerateCall::cancelled() {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void GenerateCall::Pump() {
  std::unique_lock<std::mutex> lock(mu_);
  if (reactor_ == nullptr || in_flight_ || finish_called_) return;
  Reactor* reactor = reactor_;
  // Finish once cancelled (nothing more is wanted), or once everything queued was written.
  if (cancelled_ || (!has_pending_ && !complete_ && status_)) {
    const grpc::Status finish =
        cancelled_ ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client")
                   : *status_;
    finish_called_ = true;
    lock.unlock();
    reactor->Finish(finish);
    return;
  }
  if (has_pending_) {
    current_ = std::move(pending_);
    pending_.Clear();
    has_pending_ = false;
  } else if (complete_) {
    current_ = std::move(*complete_);
    complete_.reset();
  } else {
    return;  // nothing to send yet
  }
  in_flight_ = true;
  lock.unlock();
  // The reactor stays valid: OnDone cannot run while a write is in flight.
  reactor->StartWrite(&current_);
}

void GenerateCall::WriteDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
    current_.Clear();
  }
  if (!ok) {
    Cancelled();  // the client went away mid-write
    return;
  }
  Pump();
}

void GenerateCall::Cancelled() {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = !cancelled_ && !finish_called_;
    cancelled_ = true;
  }
  if (first) {
    // GenerationRun belongs to the strand: cancel its worker streams there.
    asio::post(strand_, [self = shared_from_this()] {
      if (self->run_ != nullptr) self->run_->CancelAll();
    });
  }
  Pump();
}

void GenerateCall::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  reactor_ = nullptr;
}

}  // namespace xserv::router::grpc_api
