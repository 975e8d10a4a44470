// GenerationRun: the choices of one OpenAI request (n per prompt) streaming from worker replicas.
// Worker events arrive on gRPC threads and are queued to the request's handler coroutine, which
// calls Next() to turn them into per-choice output deltas (detokenised, reasoning split, stop
// strings applied). A stream that fails before its first token is retried on another replica.
//
// Ownership and threading: owned by one handler coroutine; every method except the worker
// callbacks (internal) runs on that coroutine's executor. Destroying the run cancels what is still
// streaming; the shared queue keeps late callbacks safe.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "router/http/async_queue.h"
#include "router/openai/prepare.h"
#include "router/openai/responses.h"
#include "router/output/output_pipeline.h"
#include "router/routing/replica_pool.h"
#include "router/routing/worker_stream.h"
#include "router/server/router_state.h"

namespace xserv::router {

// What Next() reports for one choice.
struct ChoiceUpdate {
  uint32_t index = 0;
  output::OutputDelta delta;
  std::vector<xserv::worker::v1::PositionLogprobs> logprobs;         // for delta.token_ids
  std::vector<xserv::worker::v1::PositionLogprobs> prompt_logprobs;  // once, with echo
  std::optional<std::string> finish_reason;  // set on the choice's last update
  std::optional<StopReason> stop_reason;
  absl::Status error;  // the choice failed (no finish_reason)
};

class GenerationRun {
 public:
  GenerationRun(RouterState& state, PreparedGeneration prepared, std::string request_id,
                int32_t priority, boost::asio::any_io_executor executor);
  ~GenerationRun();

  // Starts every choice's stream. Unavailable when no replica is ready.
  absl::Status Start();
  // Waits for worker events and returns the updates they produced (possibly several choices);
  // an empty vector means every choice has ended.
  boost::asio::awaitable<std::vector<ChoiceUpdate>> Next();
  // Cancels every stream still running (client gone, shutdown). Safe to call repeatedly.
  void CancelAll();
  // The client went away while the caller will not wait on Next() again: every choice not yet
  // ended counts as an abort, then CancelAll.
  void Abandon();

  size_t num_choices() const { return choices_.size(); }
  const PreparedGeneration& prepared() const { return prepared_; }
  UsageCounts usage() const;
  // The accumulated result of every choice (non-streaming responses).
  std::vector<ChoiceResult> Results() const;
  // The first error a choice ended with (OK when none).
  absl::Status first_error() const;

 private:
  // An Event for every choice at once: the drain deadline passed (RouterState::shutdown).
  static constexpr size_t kShutdownEvent = static_cast<size_t>(-1);
  struct Event {
    size_t choice;  // or kShutdownEvent
    int attempt;
    WorkerEvent event;
  };
  struct Choice {
    uint32_t index = 0;
    size_t prompt = 0;
    std::optional<output::OutputPipeline> pipeline;
    std::shared_ptr<WorkerStreamHandle> stream;
    std::unique_ptr<ReplicaLease> lease;
    std::vector<int> tried;  // replica indices that failed this choice
    int attempt = 0;
    bool got_tokens = false;
    bool ended = false;   // finish reason or error decided
    bool closed = false;  // the worker stream is done
    int64_t completion_tokens = 0;
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;
    output::OutputText text;
    std::vector<xserv::worker::v1::PositionLogprobs> logprobs;
    std::vector<xserv::worker::v1::PositionLogprobs> prompt_logprobs;
    std::string finish_reason;
    std::optional<StopReason> stop_reason;
    absl::Status error;
    std::chrono::steady_clock::time_point last_token{};
  };

  absl::Status Launch(Choice& choice);
  void Handle(Event& event, std::vector<ChoiceUpdate>& updates);
  void EndForShutdown(std::vector<ChoiceUpdate>& updates);
  void Finish(Choice& choice, ChoiceUpdate& update, std::string reason,
              std::optional<StopReason> stop_reason);

  RouterState& state_;
  const PreparedGeneration prepared_;
  const std::string request_id_;
  const int32_t priority_;
  std::shared_ptr<http::AsyncQueue<Event>> queue_;
  std::vector<Choice> choices_;
  const std::chrono::steady_clock::time_point start_;
  bool first_token_seen_ = false;
  uint64_t shutdown_subscription_ = 0;  // RouterState::shutdown
};

}  // namespace xserv::router
