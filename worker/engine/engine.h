// Engine: the worker's single engine-loop thread. It owns the scheduler, the model, the KV cache
// and the step-input builder; each iteration it drains the inbox, asks the scheduler for a step
// plan, moves KV blocks, runs the forward pass, samples, applies stop rules and hands tokens to
// each request's OutputSink.
//
// Threading: Submit, Abort, Load and Stop may be called from any thread (gRPC reactors, signal
// handling); they only touch the inbox and the load snapshot under a mutex. Everything else runs
// on the loop thread started by Start(). A failed forward pass is fatal: every request ends with
// kError and failure() reports why, so the process can exit and be restarted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/clock.h"
#include "worker/engine/device_step.h"
#include "worker/engine/output_sink.h"
#include "worker/engine/plan_channel.h"
#include "worker/engine/scheduler.h"
#include "worker/model/batch_builder.h"
#include "worker/engine/step_phases.h"
#include "worker/model/decode_graphs.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"
#include "worker/parallel/communicator.h"
#include "worker/sampling/sampling_params.h"

namespace xserv::engine {

struct GenerateParams {
  std::string request_id;           // unique among live requests
  std::vector<int32_t> prompt;      // non-empty, every id < vocab
  sampling::SamplingParams sampling;
  std::optional<int32_t> max_tokens;  // default: the rest of the context
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int32_t priority = 0;
  std::shared_ptr<OutputSink> sink;
};

struct EngineConfig {
  SchedulerConfig scheduler;
  std::vector<int32_t> eos_token_ids;
  // Multi-rank replica: the leader sends every DeviceStep from rank `step_root` of this
  // communicator (it spans every rank of the replica; PlanChannel) before running it, sends
  // kIdle while idle and kStop when stopping. Not owned; used only on the loop thread (the
  // model's collectives may share it, in the same order on every rank). Null for a single-rank
  // replica.
  parallel::Communicator* step_comm = nullptr;
  int step_root = 0;
  // The leader's place in the pipeline (it is the last stage: it samples).
  PipelineLink pipeline;
  std::chrono::milliseconds idle_heartbeat{1000};
  // Decode steps as graph replays (model/decode_graphs.h) where the backend has graphs; for
  // single-stage replicas (pipeline stages and tensor-parallel ranks: see below).
  bool graphs = false;
  // Decode graphs on tensor-parallel ranks too (their all-reduces captured with the kernels):
  // every rank must run them, or a rank that fell out of step would hang its peers.
  bool graphs_with_collectives = false;
  // Decode graphs on pipeline stages whose hand-off is device to device (NCCL): each stage's
  // receive, layers and send are one graph. Every stage must run them, padded alike.
  bool graphs_with_pipeline = false;
  // scheduler.overlap_decodes turns on overlap scheduling (docs/overlap-scheduling.md; single-
  // rank replicas only): step N+1 is planned and prepared while step N runs on the device; once
  // N's tokens are sampled they are put into N+1's continued rows on the host, N+1 is launched,
  // and only then are N's results applied and streamed (RunOverlappedStep).
};

// A consistent snapshot for the Load RPC and metrics.
struct EngineLoad {
  SchedulerStats stats;
  double step_time_ms_avg = 0;  // exponential average over recent steps
  bool draining = false;
};

// The decode graphs of a rank (leader or peer) when `config.graphs` and the model is a single
// stage, or a pipeline stage with graphs_with_pipeline and a device hand-off; null otherwise.
// Every rank of a replica must make the same decision with the same limits (the largest decode
// step, SchedulerConfig::MaxLogitsRows, the same on every stage), so that they pad, capture and
// replay the same steps.
std::unique_ptr<model::DecodeGraphs> MakeDecodeGraphs(const EngineConfig& config,
                                                      kernels::Backend& backend,
                                                      model::Model& model, model::KvCache& kv,
                                                      model::BatchBuilder& builder);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config,
                                                        kernels::Backend& backend,
                                                        std::unique_ptr<model::Model> model,
                                                        std::unique_ptr<model::KvCache> kv,
                                                        const Clock* clock);
  ~Engine();

  void Start();
  // Aborts every request still in flight (their sinks get kAbort) and joins the loop.
  void Stop();
  // Refuse new requests from now on; in-flight ones continue.
  void Drain();

  // Validates and queues a request. InvalidArgument with a clear message for bad input,
  // AlreadyExists for a live id, Unavailable when draining or stopped or failed.
  absl::Status Submit(GenerateParams params);
  // Aborts a live request in whatever state; unknown ids are ignored. Returns whether it was live.
  bool Abort(const std::string& request_id);

  EngineLoad Load() const;
  // How long the loop has been in its current step (0 when between steps): a step that does not
  // end (a peer rank or a collective hung) shows here. Any thread.
  double StepRunningSeconds() const;
  int64_t num_live_requests() const;
  absl::Status failure() const;
  const model::Model& model() const { return *model_; }
  int32_t max_model_len() const { return config_.scheduler.max_model_len; }

 private:
  struct Live;  // per-request state owned by the loop (engine.cc)
  // A plan published to the peers and not yet run on this rank.
  struct PendingStep {
    StepPlan plan;
    DeviceStep step;
    std::vector<int64_t> first_row;  // per sequence: its first logits row
    int64_t rows = 0;                // logits rows of the step
  };

  Engine(const EngineConfig& config, kernels::Backend& backend, std::unique_ptr<model::Model> model,
         std::unique_ptr<model::KvCache> kv, std::unique_ptr<Scheduler> scheduler,
         model::BatchBuilder builder, const Clock* clock);

  void Loop();
  void DrainInbox();
  // The live request `id`, or null once the scheduler has ended it (aborted, or stopped while a
  // later step of it was in flight): such a request gets no row sampled and no token streamed;
  // the scheduler drops its results.
  Live* LiveOf(RequestId id);
  // One scheduler step: plans (and publishes) the next step while the pipeline has room, then
  // runs the oldest outstanding one unless another may still be planned first. True when it
  // did anything (planned or ran a batch, or delivered a finish).
  absl::StatusOr<bool> RunStep();
  // The next plan, its finished requests delivered (`delivered`: there were some), prepared;
  // nullopt when it has nothing to run.
  std::optional<PendingStep> PlanStep(bool& delivered);
  PendingStep PrepareStep(StepPlan plan);
  // Runs `pending` on this rank, samples and hands the result to the scheduler and the sinks.
  absl::Status FinishStep(const PendingStep& pending);
  // FinishStep's parts: the sampling of a step whose forward has been launched (its logits),
  // which waits for the device; and the result handed to the scheduler and the outbox.
  // draw_row: per sequence, its drawn row (-1: none).
  absl::StatusOr<std::vector<kernels::SampleRowResult>> SampleStep(
      const PendingStep& pending, const kernels::Tensor& logits, std::vector<int64_t>& draw_row);
  absl::Status ApplyResults(const PendingStep& pending,
                            const std::vector<kernels::SampleRowResult>& sampled,
                            const std::vector<int64_t>& draw_row);
  // Overlap scheduling's step: samples the launched step, launches the next (planned
  // meanwhile), then applies the sampled results.
  absl::StatusOr<bool> RunOverlappedStep();
  // The launch of a prepared step, kept in launched_ to be sampled unless it only moves blocks.
  absl::Status LaunchOverlapped(PendingStep pending);
  // Sends `step` to the peer ranks (no-op without step_comm).
  absl::Status Publish(const DeviceStep& step);
  void DeliverFinished(const FinishedRequest& finished);
  // Streams what the outbox holds to the sinks, in order (loop thread, no lock held).
  void FlushOutbox();
  void FailAll(const absl::Status& status);
  void UpdateLoad(double step_ms);

  const EngineConfig config_;
  kernels::Backend& backend_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::KvCache> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  model::BatchBuilder builder_;
  std::unique_ptr<model::DecodeGraphs> graphs_;  // config.graphs on a single-rank replica
  const Clock* clock_;
  kernels::Buffer logits_;      // f32 [max_tokens, vocab]
  DeviceStepRunner runner_;
  std::chrono::steady_clock::time_point last_publish_{};  // loop thread: the last step sent
  std::deque<PendingStep> pending_;  // loop thread: published, oldest first
  // Overlap scheduling: the step whose forward runs on the device, not yet sampled.
  struct Launched {
    PendingStep pending;
    kernels::Tensor logits;
  };
  std::optional<Launched> launched_;
  std::unique_ptr<PlanChannel> plans_;  // to the peer ranks (multi-rank replicas)

  // Loop-thread state.
  // Token and finish deliveries not yet handed to their sinks: a step's are flushed once the
  // next step has been launched, so the host streams them while the device computes (async
  // output processing), or before the loop waits. One queue keeps each request's order (its
  // tokens, then its finish).
  struct Delivery {
    std::shared_ptr<OutputSink> sink;
    std::vector<TokenOutput> tokens;
    std::vector<sampling::PositionLogprobs> prompt_logprobs;
    std::optional<FinishInfo> finished;
  };
  std::vector<Delivery> outbox_;
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  RequestId next_id_ = 1;

  // Shared state, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<GenerateParams> inbox_adds_;
  std::vector<std::string> inbox_aborts_;
  std::unordered_map<std::string, RequestId> live_ids_;  // external id -> internal (once added)
  std::unordered_set<std::string> pending_ids_;          // submitted, not yet added
  bool stop_ = false;
  bool draining_ = false;
  absl::Status failure_;
  EngineLoad load_;
  StepPhaseTimes phases_{std::chrono::steady_clock::now()};  // loop thread
  // steady_clock nanoseconds when the current step began; 0 between steps.
  std::atomic<int64_t> step_started_ns_{0};
  std::thread thread_;
};

}  // namespace xserv::engine
