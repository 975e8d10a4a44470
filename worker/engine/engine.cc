#include "worker/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "worker/engine/live_request.h"

namespace xserv::engine {
namespace {

double Seconds(Time from, Time to) { return std::chrono::duration<double>(to - from).count(); }

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config,
                                                       kernels::Backend& backend,
                                                       std::unique_ptr<model::Model> model,
                                                       std::unique_ptr<model::KvCache> kv,
                                                       const Clock* clock) {
  RETURN_IF_ERROR(config.scheduler.Validate());
  if (config.scheduler.blocks.block_size != kv->block_size() ||
      config.scheduler.blocks.num_device_blocks != kv->num_blocks() ||
      config.scheduler.blocks.num_host_blocks > kv->num_host_blocks()) {
    return absl::InvalidArgumentError("engine: scheduler block pools differ from the KV cache");
  }
  if (config.scheduler.max_num_batched_tokens > model->max_num_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: max_num_batched_tokens ", config.scheduler.max_num_batched_tokens,
        " exceeds the model workspace of ", model->max_num_tokens(), " tokens"));
  }
  if (config.scheduler.overlap_decodes && (config.step_comm != nullptr || !model->is_first_stage() ||
                         !model->is_last_stage() || model->tp_size() > 1)) {
    return absl::InvalidArgumentError(
        "engine: overlap scheduling runs on single-rank replicas only (no TP or PP)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, Scheduler::Create(config.scheduler, clock));
  const int64_t block_size = kv->block_size();
  ASSIGN_OR_RETURN(
      model::BatchBuilder builder,
      model::BatchBuilder::Create(
          backend, model::BatchLimits{
                       .max_tokens = config.scheduler.max_num_batched_tokens,
                       .max_seqs = config.scheduler.max_num_seqs,
                       .max_blocks_per_seq =
                           (config.scheduler.max_model_len + block_size - 1) / block_size,
                       .block_size = block_size,
                       .window_tables = config.scheduler.blocks.window_tokens > 0}));
  auto engine = std::unique_ptr<Engine>(new Engine(config, backend, std::move(model), std::move(kv),
                                                   std::move(scheduler), std::move(builder),
                                                   clock));
  // Logits rows: one per sampled sequence normally; prompt logprobs need a row per prompt
  // position of their chunk, and grow the buffer then (rare; see RunStep).
  const int64_t logits_rows = config.scheduler.MaxLogitsRows();
  ASSIGN_OR_RETURN(engine->logits_,
                   backend.Allocate(kernels::DType::kF32,
                                    {logits_rows, engine->model_->config().vocab_size}));
  engine->graphs_ =
      MakeDecodeGraphs(config, backend, *engine->model_, *engine->kv_, engine->builder_);
  engine->runner_.set_graphs(engine->graphs_.get());
  return engine;
}

std::unique_ptr<model::DecodeGraphs> MakeDecodeGraphs(const EngineConfig& config,
                                                      kernels::Backend& backend,
                                                      model::Model& model, model::KvCache& kv,
                                                      model::BatchBuilder& builder) {
  // Tensor-parallel ranks capture too (their all-reduces are NCCL calls on the captured stream),
  // and so do pipeline stages with a device hand-off (NCCL send/recv captured likewise): every
  // rank runs the same plans, so each pads, captures and replays the same steps.
  if (!config.graphs) return nullptr;
  if (!model.is_first_stage() || !model.is_last_stage()) {
    const PipelineLink& link = config.pipeline;
    if (!config.graphs_with_pipeline || link.comm == nullptr ||
        link.comm->memory() != parallel::MemoryKind::kDevice) {
      return nullptr;
    }
  }
  if (model.tp_size() > 1 && !config.graphs_with_collectives) return nullptr;
  return std::make_unique<model::DecodeGraphs>(backend, model, kv, builder,
                                               config.scheduler.MaxLogitsRows(),
                                               static_cast<int>(config.scheduler.max_model_len));
}

Engine::Engine(const EngineConfig& config, kernels::Backend& backend,
               std::unique_ptr<model::Model> model, std::unique_ptr<model::KvCache> kv,
               std::unique_ptr<Scheduler> scheduler, model::BatchBuilder builder,
               const Clock* clock)
    : config_(config),
      backend_(backend),
      model_(std::move(model)),
      kv_(std::move(kv)),
      scheduler_(std::move(scheduler)),
      builder_(std::move(builder)),
      clock_(clock),
      runner_(backend_, *model_, *kv_, builder_, logits_, config.pipeline) {
  if (config.step_comm != nullptr) {
    plans_ = std::make_unique<PlanChannel>(*config.step_comm, config.step_root,
                                           config.scheduler.max_in_flight_steps);
  }
}

Engine::~Engine() { Stop(); }

void Engine::Start() { thread_ = std::thread([this] { Loop(); }); }

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
  load_.draining = true;
}

absl::Status Engine::Submit(GenerateParams p) {
  const int64_t vocab = model_->config().vocab_size;
  const int32_t context = config_.scheduler.max_model_len;
  if (p.request_id.empty()) return absl::InvalidArgumentError("request_id must not be empty");
  if (p.sink == nullptr) return absl::InvalidArgumentError("request has no output sink");
  if (p.prompt.empty()) return absl::InvalidArgumentError("prompt must not be empty");
  for (size_t i = 0; i < p.prompt.size(); ++i) {
    if (p.prompt[i] < 0 || p.prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", p.prompt[i], " at position ",
                                                     i, " is outside the vocabulary of ", vocab));
    }
  }
  const int32_t prompt_len = static_cast<int32_t>(p.prompt.size());
  if (prompt_len >= context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt has ", prompt_len,
                                                   " tokens; the context holds ", context,
                                                   " including at least one generated token"));
  }
  if (!p.max_tokens) p.max_tokens = context - prompt_len;
  if (*p.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be at least 1");
  if (prompt_len + *p.max_tokens > context) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens ", *p.max_tokens, " plus ",
                                                   prompt_len, " prompt tokens exceeds the context of ",
                                                   context));
  }
  if (p.min_tokens < 0 || p.min_tokens > *p.max_tokens) {
    return absl::InvalidArgumentError("min_tokens must be between 0 and max_tokens");
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("stop token id ", id,
                                                     " is outside the vocabulary"));
    }
  }
  RETURN_IF_ERROR(p.sampling.Validate(vocab));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return absl::UnavailableError("engine failed: " + failure_.ToString());
    if (stop_ || draining_) return absl::UnavailableError("worker is draining");
    if (live_ids_.contains(p.request_id) || pending_ids_.contains(p.request_id)) {
      return absl::AlreadyExistsError("request id " + p.request_id + " is already live");
    }
    pending_ids_.insert(p.request_id);
    inbox_adds_.push_back(std::move(p));
  }
  wake_.notify_one();
  return absl::OkStatus();
}

bool Engine::Abort(const std::string& request_id) {
  bool live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live = live_ids_.contains(request_id) || pending_ids_.contains(request_id);
    if (live) inbox_aborts_.push_back(request_id);
  }
  if (live) wake_.notify_one();
  return live;
}

EngineLoad Engine::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return load_;
}

int64_t Engine::num_live_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(live_ids_.size() + pending_ids_.size());
}

absl::Status Engine::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void Engine::DrainInbox() {
  std::deque<GenerateParams> adds;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(inbox_adds_);
    aborts.swap(inbox_aborts_);
  }
  static std::random_device entropy;
  for (GenerateParams& p : adds) {
    auto live = std::make_unique<Live>();
    live->arrival = clock_->Now();
    live->seed = p.sampling.seed ? *p.sampling.seed
                                 : (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
    live->banned = p.stop_token_ids;
    if (!p.ignore_eos) {
      live->banned.insert(live->banned.end(), config_.eos_token_ids.begin(),
                          config_.eos_token_ids.end());
    }
    live->params = std::move(p);
    const RequestId id = next_id_++;
    RequestSpec spec;
    spec.id = id;
    spec.prompt_token_ids = live->params.prompt;
    spec.max_tokens = *live->params.max_tokens;
    spec.priority = live->params.priority;
    spec.use_prefix_cache = live->params.sampling.prompt_logprobs < 0;
    const absl::Status added = scheduler_->AddRequest(std::move(spec));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ids_.erase(live->params.request_id);
      if (added.ok()) live_ids_[live->params.request_id] = id;
    }
    if (!added.ok()) {  // sinks are called without the lock: they may call back into Abort
      live->params.sink->OnFinished(FinishInfo{
          .reason = FinishReason::kError,
          .prompt_tokens = static_cast<int32_t>(live->params.prompt.size()),
          .message = std::string(added.message())});
      continue;
    }
    live_[id] = std::move(live);
  }
  for (const std::string& external : aborts) {
    RequestId id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_ids_.find(external);
      if (it == live_ids_.end()) continue;
      id = it->second;
    }
    // Reported as kAbort in the next plan's finished list.
    (void)scheduler_->AbortRequest(id, "aborted by the client");
  }
}

void Engine::DeliverFinished(const FinishedRequest& finished) {
  auto it = live_.find(finished.request_id);
  if (it == live_.end()) return;
  Live& l = *it->second;
  const Time now = clock_->Now();
  FinishInfo info;
  info.reason = finished.reason;
  if (finished.reason == FinishReason::kStop) info.stop_token = l.stop_token;
  info.prompt_tokens = finished.num_prompt_tokens;
  info.completion_tokens = finished.num_output_tokens;
  info.cached_prompt_tokens = l.cached_tokens;
  info.message = finished.message;
  info.queue_time_s = Seconds(l.arrival, l.first_scheduled.value_or(now));
  info.time_to_first_token_s = l.first_token ? Seconds(l.arrival, *l.first_token) : 0.0;
  if (l.WantsPromptLogprobs() || (!l.prompt_logprobs_sent && !l.prompt_logprobs.empty())) {
    // e.g. aborted after prefill
    outbox_.push_back({.sink = l.params.sink, .prompt_logprobs = std::move(l.prompt_logprobs)});
  }
  outbox_.push_back({.sink = l.params.sink, .finished = info});
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_ids_.erase(l.params.request_id);
  }
  live_.erase(it);
}

absl::Status Engine::Publish(const DeviceStep& step) {
  if (plans_ == nullptr) return absl::OkStatus();
  last_publish_ = std::chrono::steady_clock::now();
  return plans_->Send(SerializeDeviceStep(step));
}

void Engine::FlushOutbox() {
  std::vector<Delivery> batch;
  batch.swap(outbox_);
  for (Delivery& d : batch) {
    if (!d.tokens.empty() || !d.prompt_logprobs.empty()) {
      d.sink->OnTokens(std::move(d.tokens), std::move(d.prompt_logprobs));
    }
    if (d.finished) d.sink->OnFinished(*d.finished);
  }
}

void Engine::FailAll(const absl::Status& status) {
  spdlog::critical("engine failed: {}", status.ToString());
  FlushOutbox();  // what was decided before the failure still reaches its streams
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = status;
  }
  for (auto& [id, live] : live_) {
    live->params.sink->OnFinished(FinishInfo{.reason = FinishReason::kError,
                                             .message = "engine failure: " + status.ToString()});
  }
  live_.clear();
  pending_.clear();
  launched_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  live_ids_.clear();
}

double Engine::StepRunningSeconds() const {
  const int64_t started = step_started_ns_.load();
  if (started == 0) return 0;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  return static_cast<double>(now - started) * 1e-9;
}

void Engine::UpdateLoad(double step_ms) {
  const SchedulerStats stats = scheduler_->Stats();
  std::lock_guard<std::mutex> lock(mu_);
  load_.stats = stats;
  load_.step_time_ms_avg =
      load_.step_time_ms_avg == 0 ? step_ms : 0.9 * load_.step_time_ms_avg + 0.1 * step_ms;
}

void Engine::Loop() {
  bool progressed = true;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Published steps are run even when every request in them has ended meanwhile: the other
      // ranks run them too.
      const bool published = !pending_.empty() || launched_.has_value();
      auto ready = [&] {
        return stop_ || published || !inbox_adds_.empty() || !inbox_aborts_.empty() ||
               (progressed && scheduler_->HasPendingWork());
      };
      // No step is about to launch: stream what is waiting before the loop sleeps (sinks are
      // called without the lock: they may call back into Abort).
      if (!outbox_.empty() && !ready()) {
        lock.unlock();
        FlushOutbox();
        lock.lock();
      }
      // A step that did nothing (requests waiting on something) is retried after a pause
      // rather than spun on. (Every wait below returns at once while `ready` holds.)
      if (scheduler_->HasPendingWork() && !progressed) {
        wake_.wait_for(lock, std::chrono::milliseconds(5), ready);
      } else if (config_.step_comm != nullptr) {
        // Peers wait for the next plan with a timeout: tell them the leader is alive but idle.
        if (!wake_.wait_for(lock, config_.idle_heartbeat, ready)) {
          lock.unlock();
          const absl::Status sent = Publish(DeviceStep{.kind = DeviceStep::Kind::kIdle});
          if (!sent.ok()) {
            FailAll(sent);
            return;
          }
          continue;
        }
      } else {
        wake_.wait(lock, ready);
      }
      if (stop_) break;
    }
    // Steps that run nothing publish nothing; while they repeat (requests waiting on blocks),
    // the peers still need a sign of life before their collective times out.
    if (config_.step_comm != nullptr && !progressed &&
        std::chrono::steady_clock::now() - last_publish_ >= config_.idle_heartbeat) {
      if (const absl::Status sent = Publish(DeviceStep{.kind = DeviceStep::Kind::kIdle});
          !sent.ok()) {
        FailAll(sent);
        return;
      }
    }
    DrainInbox();
    const auto start = std::chrono::steady_clock::now();
    step_started_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           start.time_since_epoch()).count();
    const absl::StatusOr<bool> step = RunStep();
    step_started_ns_ = 0;
    if (!step.ok()) {
      FailAll(step.status());
      return;
    }
    progressed = *step;
    const auto now = std::chrono::steady_clock::now();
    UpdateLoad(std::chrono::duration<double, std::milli>(now - start).count());
    if (std::optional<std::string> line = phases_.Report(now, std::chrono::seconds(10))) {
      spdlog::info("{}", *line);
    }
  }
  // Shutdown: steps the peers already run are run here too (their results are dropped), so
  // every hand-off between stages completes; then peers leave their loops and everything still
  // live ends as aborted.
  for (const PendingStep& pending : pending_) {
    if (const absl::Status ran = runner_.Run(pending.step).status(); !ran.ok()) {
      spdlog::warn("running a step still in flight at shutdown: {}", ran.ToString());
      break;
    }
  }
  pending_.clear();
  launched_.reset();  // overlap scheduling: launched, never sampled; its requests end below
  FlushOutbox();  // every decided token and finish before the aborts below
  absl::Status stopped = Publish(DeviceStep{.kind = DeviceStep::Kind::kStop});
  if (stopped.ok() && plans_ != nullptr) stopped = plans_->Flush();
  if (!stopped.ok()) spdlog::warn("telling the peer ranks to stop: {}", stopped.ToString());
  DrainInbox();
  for (auto& [id, live] : live_) {
    live->params.sink->OnFinished(FinishInfo{
        .reason = FinishReason::kAbort,
        .prompt_tokens = static_cast<int32_t>(live->params.prompt.size()),
        .completion_tokens = static_cast<int32_t>(scheduler_->OutputTokens(id).size()),
        .message = "worker shutting down"});
  }
  live_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  live_ids_.clear();
}

}  // namespace xserv::engine
