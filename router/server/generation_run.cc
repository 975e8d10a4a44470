#include "router/server/generation_run.h"

#include "absl/strings/str_cat.h"
#include "common/grpc/status_conversion.h"
#include "spdlog/spdlog.h"

namespace xserv::router {

namespace wv1 = xserv::worker::v1;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Transport-level failures a different replica may not have; request errors are not retried.
bool Retryable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::UNKNOWN ||
         status.error_code() == grpc::StatusCode::INTERNAL;
}

}  // namespace

GenerationRun::GenerationRun(RouterState& state, PreparedGeneration prepared,
                             std::string request_id, int32_t priority,
                             boost::asio::any_io_executor executor)
    : state_(state),
      prepared_(std::move(prepared)),
      request_id_(std::move(request_id)),
      priority_(priority),
      queue_(std::make_shared<http::AsyncQueue<Event>>(std::move(executor))),
      start_(Clock::now()) {
  for (size_t p = 0; p < prepared_.prompts.size(); ++p) {
    for (uint32_t i = 0; i < prepared_.n; ++i) {
      Choice c;
      c.index = static_cast<uint32_t>(choices_.size());
      c.prompt = p;
      choices_.push_back(std::move(c));
    }
  }
  // The callback may run on main()'s thread: it only posts to the queue, which is thread-safe.
  std::weak_ptr<http::AsyncQueue<Event>> queue = queue_;
  shutdown_subscription_ = state_.shutdown.Subscribe([queue] {
    if (auto q = queue.lock()) q->Push(Event{kShutdownEvent, 0, WorkerEvent{}});
  });
}

GenerationRun::~GenerationRun() {
  state_.shutdown.Unsubscribe(shutdown_subscription_);
  CancelAll();
  queue_->Close();
}

absl::Status GenerationRun::Start() {
  for (Choice& c : choices_) {
    auto pipeline = output::OutputPipeline::Create(*state_.model->tokenizer, prepared_.output);
    if (!pipeline.ok()) return pipeline.status();
    c.pipeline.emplace(std::move(*pipeline));
    if (auto status = Launch(c); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status GenerationRun::Launch(Choice& c) {
  const PreparedPrompt& prompt = prepared_.prompts[c.prompt];
  c.lease = state_.pool->Acquire(prompt.ids, c.tried);
  if (c.lease == nullptr) return absl::UnavailableError("no worker replica is ready");
  wv1::GenerateRequest request;
  request.set_request_id(absl::StrCat(request_id_, "-", c.index, "-", c.attempt));
  request.mutable_prompt_token_ids()->Assign(prompt.ids.begin(), prompt.ids.end());
  *request.mutable_sampling() = prepared_.sampling;
  // n > 1 with a seed: distinct but reproducible choices.
  if (prepared_.sampling.has_seed()) {
    request.mutable_sampling()->set_seed(prepared_.sampling.seed() + c.index);
  }
  request.set_priority(priority_);
  std::weak_ptr<http::AsyncQueue<Event>> queue = queue_;
  const size_t choice = c.index;
  const int attempt = c.attempt;
  c.stream = WorkerStream::Start(c.lease->stub(), std::move(request), state_.limits.request_timeout,
                                 [queue, choice, attempt](WorkerEvent event) {
                                   if (auto q = queue.lock())
                                     q->Push(Event{choice, attempt, std::move(event)});
                                 });
  return absl::OkStatus();
}

void GenerationRun::CancelAll() {
  for (Choice& c : choices_) {
    if (c.stream && !c.closed) c.stream->Cancel();
  }
}

void GenerationRun::Abandon() {
  for (Choice& c : choices_) {
    if (c.ended) continue;
    c.ended = true;
    c.error = absl::CancelledError("the client went away");
    state_.metrics.CountRequest("abort");
  }
  CancelAll();
}

void GenerationRun::Finish(Choice& c, ChoiceUpdate& u, std::string reason,
                           std::optional<StopReason> stop_reason) {
  output::OutputDelta tail = c.pipeline->Finish();
  c.text.Append(tail);
  u.delta.reasoning += tail.reasoning;
  u.delta.content += tail.content;
  for (auto& t : tail.tool_calls) u.delta.tool_calls.push_back(std::move(t));
  if (reason == "stop" && !c.text.tool_calls.empty()) reason = "tool_calls";
  c.finish_reason = reason;
  c.stop_reason = stop_reason;
  c.ended = true;
  u.finish_reason = std::move(reason);
  u.stop_reason = std::move(stop_reason);
  state_.metrics.CountRequest(c.finish_reason);
}

void GenerationRun::EndForShutdown(std::vector<ChoiceUpdate>& updates) {
  for (Choice& c : choices_) {
    if (c.ended) continue;
    c.ended = true;
    c.error = absl::UnavailableError(
        "the server is shutting down: the request did not finish within the drain timeout");
    state_.metrics.CountRequest("abort");
    updates.push_back(ChoiceUpdate{.index = c.index, .error = c.error});
  }
  CancelAll();  // each stream still ends with kClosed, which Next() waits for
}

void GenerationRun::Handle(Event& e, std::vector<ChoiceUpdate>& updates) {
  if (e.choice == kShutdownEvent) {
    EndForShutdown(updates);
    return;
  }
  Choice& c = choices_[e.choice];
  if (e.attempt != c.attempt) return;  // a stale stream replaced by a retry
  WorkerEvent& w = e.event;
  if (w.kind == WorkerEvent::Kind::kClosed) {
    const int replica = c.lease ? c.lease->index() : -1;
    c.closed = true;
    c.lease.reset();
    if (c.ended) return;
    if (w.status.ok()) {  // ended without Finished: should not happen; report rather than hang
      c.ended = true;
      c.error = absl::InternalError("worker stream ended without a finish message");
    } else if (!c.got_tokens && c.attempt < state_.limits.retries_before_first_token &&
               Retryable(w.status)) {
      spdlog::warn("request {} choice {}: worker failed before the first token ({}); retrying",
                   request_id_, c.index, w.status.error_message());
      if (replica >= 0) state_.pool->ReportFailure(replica, w.status.error_message());
      ++c.attempt;
      if (Launch(c).ok()) {
        c.closed = false;  // a new stream is running for this choice
        return;
      }
      c.ended = true;
      c.error = absl::UnavailableError("no other worker replica is ready");
    } else {
      c.ended = true;
      c.error = FromGrpcStatus(w.status);
      if (w.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        c.error = absl::DeadlineExceededError("request timed out");
      }
    }
    // A stream the router cancelled (the client went away) ends as an abort, as vLLM counts it.
    state_.metrics.CountRequest(absl::IsCancelled(c.error) ? "abort" : "error");
    updates.push_back(ChoiceUpdate{.index = c.index, .error = c.error});
    return;
  }
  if (c.ended) return;  // e.g. tokens after a stop string
  ChoiceUpdate u{.index = c.index};
  const Clock::time_point now = Clock::now();
  if (w.kind == WorkerEvent::Kind::kDelta) {
    const wv1::TokenDelta& d = w.delta;
    for (const auto& p : d.prompt_logprobs()) c.prompt_logprobs.push_back(p);
    for (const auto& p : d.prompt_logprobs()) u.prompt_logprobs.push_back(p);
    if (!u.prompt_logprobs.empty()) c.got_tokens = true;  // output reached the client: no retry
    if (d.token_ids_size() == 0 || prepared_.prompt_only) {  // prompt_only: drop the token
      if (!u.prompt_logprobs.empty()) updates.push_back(std::move(u));
      return;
    }
    if (!first_token_seen_) {
      first_token_seen_ = true;
      state_.metrics.ObserveTtft(Seconds(now - start_));
    } else if (c.got_tokens) {
      state_.metrics.ObserveInterToken(Seconds(now - c.last_token));
    }
    c.got_tokens = true;
    c.last_token = now;
    const std::vector<uint32_t> ids(d.token_ids().begin(), d.token_ids().end());
    u.delta = c.pipeline->Step(ids);
    c.text.Append(u.delta);
    for (size_t i = 0; i < u.delta.token_ids.size() && i < static_cast<size_t>(d.logprobs_size());
         ++i) {
      u.logprobs.push_back(d.logprobs(static_cast<int>(i)));
      c.logprobs.push_back(d.logprobs(static_cast<int>(i)));
    }
    if (u.delta.stop_index) {  // a stop string completed: stop the worker, count what we used
      c.completion_tokens = static_cast<int64_t>(c.pipeline->num_tokens());
      if (c.stream) c.stream->Cancel();
      Finish(c, u, "stop", u.delta.stop_string);
    }
    updates.push_back(std::move(u));
    return;
  }
  // kFinished
  const wv1::Finished& f = w.finished;
  c.prompt_tokens = f.prompt_tokens();
  c.cached_tokens = f.cached_prompt_tokens();
  c.completion_tokens = prepared_.prompt_only ? 0 : f.completion_tokens();
  state_.metrics.ObserveQueueTime(f.queue_time_s());
  switch (f.reason()) {
    case wv1::FINISH_REASON_STOP: {
      std::optional<StopReason> stop_reason;
      // vLLM reports a matched stop_token_ids entry (not EOS) as the stop reason.
      if (f.has_stop_token_id()) {
        for (uint32_t id : prepared_.sampling.stop_token_ids()) {
          if (id == f.stop_token_id()) stop_reason = id;
        }
      }
      Finish(c, u, "stop", stop_reason);
      break;
    }
    case wv1::FINISH_REASON_LENGTH:
      Finish(c, u, "length", std::nullopt);
      break;
    default:
      c.ended = true;
      c.error = f.reason() == wv1::FINISH_REASON_ABORT
                    ? absl::UnavailableError("the worker aborted the request: " + f.message())
                    : absl::InternalError("the worker failed the request: " + f.message());
      state_.metrics.CountRequest(f.reason() == wv1::FINISH_REASON_ABORT ? "abort" : "error");
      u.error = c.error;
      break;
  }
  updates.push_back(std::move(u));
}

boost::asio::awaitable<std::vector<ChoiceUpdate>> GenerationRun::Next() {
  std::vector<ChoiceUpdate> updates;
  while (updates.empty()) {
    bool open = false;
    for (const Choice& c : choices_) open |= !c.closed;
    if (!open) break;
    std::vector<Event> events = co_await queue_->PopAll();
    if (events.empty()) break;  // queue closed
    for (Event& e : events) Handle(e, updates);
  }
  bool all_closed = true;
  for (const Choice& c : choices_) all_closed &= c.closed;
  if (all_closed && updates.empty()) {
    state_.metrics.ObserveE2e(Seconds(Clock::now() - start_));
  }
  co_return updates;
}

UsageCounts GenerationRun::usage() const {
  UsageCounts u;
  std::vector<bool> prompt_counted(prepared_.prompts.size(), false);
  for (const Choice& c : choices_) {
    u.completion_tokens += c.completion_tokens;
    if (!prompt_counted[c.prompt]) {  // a prompt counts once, however many choices it has
      prompt_counted[c.prompt] = true;
      u.prompt_tokens += c.prompt_tokens > 0
                             ? c.prompt_tokens
                             : static_cast<int64_t>(prepared_.prompts[c.prompt].ids.size());
      u.cached_tokens += c.cached_tokens;
    }
  }
  return u;
}

std::vector<ChoiceResult> GenerationRun::Results() const {
  std::vector<ChoiceResult> out;
  for (const Choice& c : choices_) {
    ChoiceResult r;
    r.index = c.index;
    r.text = c.text;
    r.finish_reason = c.finish_reason;
    r.stop_reason = c.stop_reason;
    r.logprobs = c.logprobs;
    r.prompt_logprobs = c.prompt_logprobs;
    out.push_back(std::move(r));
  }
  return out;
}

absl::Status GenerationRun::first_error() const {
  for (const Choice& c : choices_) {
    if (!c.error.ok()) return c.error;
  }
  return absl::OkStatus();
}

}  // namespace xserv::router
