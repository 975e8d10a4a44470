#include "worker/service/generate_stream.h"

#include "common/grpc/status_conversion.h"
#include "spdlog/spdlog.h"
#include "worker/service/conversions.h"

namespace xserv::worker {

namespace wv1 = xserv::worker::v1;

class GenerateStream::Reactor final : public grpc::ServerWriteReactor<wv1::GenerateResponse> {
 public:
  explicit Reactor(std::shared_ptr<GenerateStream> stream) : stream_(std::move(stream)) {}
  void OnWriteDone(bool ok) override { stream_->WriteDone(ok); }
  void OnCancel() override { stream_->Cancelled(); }
  void OnDone() override {
    stream_->Detach();
    delete this;
  }

 private:
  std::shared_ptr<GenerateStream> stream_;
};

grpc::ServerWriteReactor<wv1::GenerateResponse>* GenerateStream::Start(
    engine::Engine& engine, const wv1::GenerateRequest& request) {
  auto stream = std::shared_ptr<GenerateStream>(new GenerateStream(engine, request.request_id()));
  auto* reactor = new Reactor(stream);
  stream->reactor_ = reactor;
  auto params = ToGenerateParams(request);
  absl::Status status = params.status();
  if (params.ok()) {
    params->sink = stream;
    status = engine.Submit(std::move(*params));
  }
  if (!status.ok()) {
    {
      std::lock_guard<std::mutex> lock(stream->mu_);
      stream->finish_called_ = true;
    }
    reactor->Finish(ToGrpcStatus(status));
  }
  return reactor;
}

void GenerateStream::OnTokens(std::vector<engine::TokenOutput> tokens,
                              std::vector<sampling::PositionLogprobs> prompt_logprobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr || cancelled_) return;
    AppendPromptLogprobs(prompt_logprobs, pending_);
    AppendTokens(tokens, pending_);
    has_pending_ = true;
  }
  Pump();
}

void GenerateStream::OnFinished(const engine::FinishInfo& info) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr) return;
    finished_ = ToFinished(info);
  }
  Pump();
}

void GenerateStream::Pump() {
  std::unique_lock<std::mutex> lock(mu_);
  if (reactor_ == nullptr || in_flight_ || finish_called_) return;
  Reactor* reactor = reactor_;
  if (cancelled_) {
    finish_called_ = true;
    lock.unlock();
    reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "generation cancelled"));
    return;
  }
  current_.Clear();
  if (has_pending_) {
    *current_.mutable_delta() = std::move(pending_);
    pending_.Clear();
    has_pending_ = false;
  } else if (finished_) {
    *current_.mutable_finished() = std::move(*finished_);
    finished_.reset();
    finished_written_ = true;
  } else if (finished_written_) {
    finish_called_ = true;
    lock.unlock();
    reactor->Finish(grpc::Status::OK);
    return;
  } else {
    return;  // nothing to send yet
  }
  in_flight_ = true;
  lock.unlock();
  // The reactor stays valid: OnDone cannot run while a write is in flight.
  reactor->StartWrite(&current_);
}

void GenerateStream::WriteDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
  }
  if (!ok) {
    Cancelled();  // the client went away mid-write
    return;
  }
  Pump();
}

void GenerateStream::Cancelled() {
  bool abort = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_ && !finished_written_) abort = true;
    cancelled_ = true;
  }
  if (abort && engine_.Abort(request_id_)) {
    spdlog::debug("request {} cancelled by the client", request_id_);
  }
  Pump();
}

void GenerateStream::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  reactor_ = nullptr;
}

}  // namespace xserv::worker
