#include "tests/tools/fake_worker.h"

#include <grpcpp/alarm.h>

#include <algorithm>
#include <mutex>
#include <optional>

#include "common/version.h"

namespace xserv::testing {

namespace wv1 = xserv::worker::v1;
using Clock = std::chrono::system_clock;

absl::Status FakeWorkerOptions::Validate() const {
  if (vocab_size == 0) return absl::InvalidArgumentError("vocab_size must be positive");
  if (max_context == 0) return absl::InvalidArgumentError("max_context must be positive");
  if (token_interval.count() < 0) {
    return absl::InvalidArgumentError("token_interval must not be negative");
  }
  for (uint32_t id : script_ids) {
    if (id >= vocab_size) return absl::InvalidArgumentError("a script id is outside the vocabulary");
  }
  return absl::OkStatus();
}

// One Generate call. At most one operation is pending at any time (a write or the interval
// alarm), and Finish is only called when none is, so OnDone (which deletes the reactor) never
// races a pending write or alarm callback.
class FakeWorkerService::GenerateReactor final
    : public grpc::ServerWriteReactor<wv1::GenerateResponse> {
 public:
  GenerateReactor(FakeWorkerService& service, const wv1::GenerateRequest& request)
      : service_(service), start_(Clock::now()) {
    const FakeWorkerOptions& o = service.options_;
    prompt_tokens_ = static_cast<uint32_t>(request.prompt_token_ids_size());
    const uint32_t max_tokens = std::min(
        request.sampling().has_max_tokens() ? request.sampling().max_tokens()
                                            : (o.script_ids.empty() ? o.default_max_tokens
                                                                    : o.max_context),
        o.max_context);
    if (!o.script_ids.empty()) {
      const size_t n = std::min<size_t>(o.script_ids.size(), max_tokens);
      ids_.assign(o.script_ids.begin(), o.script_ids.begin() + static_cast<std::ptrdiff_t>(n));
      const uint32_t last = o.script_ids.back();
      const bool stops =
          std::find(o.eos_token_ids.begin(), o.eos_token_ids.end(), last) != o.eos_token_ids.end() ||
          std::find(request.sampling().stop_token_ids().begin(),
                    request.sampling().stop_token_ids().end(),
                    last) != request.sampling().stop_token_ids().end();
      if (n == o.script_ids.size() && stops) stop_token_ = last;
    } else {
      ids_.reserve(max_tokens);
      for (uint32_t i = 0; i < max_tokens; ++i) {
        ids_.push_back(request.prompt_token_ids(static_cast<int>(i % prompt_tokens_)));
      }
    }
    ++service_.num_running_;
    service_.prompt_total_ += prompt_tokens_;
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wait_ = Wait::kNone;
      if (!ok) cancelled_ = true;  // the client went away mid-write
    }
    Pump();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      // The alarm's callback runs (with ok = false) on another thread, never inline.
      if (wait_ == Wait::kTimer) alarm_.Cancel();
    }
    Pump();
  }

  void OnDone() override {
    --service_.num_running_;
    delete this;
  }

 private:
  enum class Wait { kNone, kWrite, kTimer };
  // kTokens: writing ids; kFinishMessage: the Finished message is being written; kClosed: Finish
  // was called.
  enum class Stage { kTokens, kFinishMessage, kClosed };

  void OnAlarm() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wait_ = Wait::kNone;
    }
    Pump();
  }

  // Starts the next operation, if none is pending.
  void Pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait_ != Wait::kNone || stage_ == Stage::kClosed) return;
    if (cancelled_) {
      stage_ = Stage::kClosed;
      lock.unlock();
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "generation cancelled"));
      return;
    }
    if (stage_ == Stage::kFinishMessage) {
      stage_ = Stage::kClosed;
      lock.unlock();
      Finish(grpc::Status::OK);
      return;
    }
    message_.Clear();
    if (next_ < ids_.size()) {
      const auto interval = service_.options_.token_interval;
      if (interval.count() > 0) {
        const Clock::time_point due = start_ + interval * static_cast<int64_t>(next_ + 1);
        if (Clock::now() < due) {
          wait_ = Wait::kTimer;
          alarm_.Set(due, [this](bool) { OnAlarm(); });
          return;
        }
      }
      message_.mutable_delta()->add_token_ids(ids_[next_++]);
      ++service_.generated_total_;
    } else {
      wv1::Finished* f = message_.mutable_finished();
      f->set_reason(stop_token_ ? wv1::FINISH_REASON_STOP : wv1::FINISH_REASON_LENGTH);
      if (stop_token_) f->set_stop_token_id(*stop_token_);
      f->set_prompt_tokens(prompt_tokens_);
      f->set_completion_tokens(static_cast<uint32_t>(ids_.size()));
      f->set_time_to_first_token_s(service_.options_.token_interval.count() * 1e-6);
      stage_ = Stage::kFinishMessage;
    }
    wait_ = Wait::kWrite;
    lock.unlock();
    StartWrite(&message_);
  }

  FakeWorkerService& service_;
  const Clock::time_point start_;
  std::vector<uint32_t> ids_;
  std::optional<uint32_t> stop_token_;
  uint32_t prompt_tokens_ = 0;

  std::mutex mu_;
  size_t next_ = 0;  // index in ids_ of the next id to write
  Wait wait_ = Wait::kNone;
  Stage stage_ = Stage::kTokens;
  bool cancelled_ = false;
  grpc::Alarm alarm_;
  wv1::GenerateResponse message_;  // the write in flight
};

grpc::ServerWriteReactor<wv1::GenerateResponse>* FakeWorkerService::Generate(
    grpc::CallbackServerContext*, const wv1::GenerateRequest* request) {
  if (request->prompt_token_ids_size() == 0 || draining_) {
    class Refuse final : public grpc::ServerWriteReactor<wv1::GenerateResponse> {
     public:
      explicit Refuse(grpc::Status status) { Finish(status); }
      void OnDone() override { delete this; }
    };
    return new Refuse(draining_ ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining")
                                : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                               "prompt_token_ids is empty"));
  }
  return new GenerateReactor(*this, *request);
}

grpc::ServerUnaryReactor* FakeWorkerService::Health(grpc::CallbackServerContext* context,
                                                    const wv1::HealthRequest*,
                                                    wv1::HealthResponse* response) {
  response->set_state(draining_ ? wv1::HealthResponse::STATE_DRAINING
                                : wv1::HealthResponse::STATE_SERVING);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FakeWorkerService::Info(grpc::CallbackServerContext* context,
                                                  const wv1::InfoRequest*,
                                                  wv1::InfoResponse* response) {
  response->set_model_name(options_.model_name);
  response->set_model_type(options_.model_type);
  response->set_vocab_size(options_.vocab_size);
  for (uint32_t id : options_.eos_token_ids) response->add_eos_token_ids(id);
  response->set_max_context(options_.max_context);
  response->set_block_size(16);
  response->set_backend("fake");
  response->set_version(VersionString());
  response->mutable_layout()->set_tp_size(1);
  response->mutable_layout()->set_pp_size(1);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FakeWorkerService::Load(grpc::CallbackServerContext* context,
                                                  const wv1::LoadRequest*,
                                                  wv1::LoadResponse* response) {
  response->set_num_running(static_cast<uint32_t>(std::max(0, num_running_.load())));
  response->set_prompt_tokens_total(prompt_total_.load());
  response->set_generation_tokens_total(generated_total_.load());
  response->set_draining(draining_);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace xserv::testing
