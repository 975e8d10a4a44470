// xserv-worker: serves one model shard over the internal xserv.worker.v1.Worker gRPC service.
// One process per rank of a replica: the leader (tensor-parallel rank 0) runs the scheduler and
// the engine loop; peers (--tp-rank > 0) follow the leader's step plans (worker/engine/peer_loop.h).
//
// Lifecycle: start the gRPC server (Health reports STARTING; a TP leader serves Rendezvous so its
// peers can join), join the TP group (Gloo over the leader's Rendezvous store), load this rank's
// shard, agree on the KV pool size, start the engine loop (leader) and report SERVING. On
// SIGTERM/SIGINT the leader drains (refuse new requests, let in-flight ones finish within
// --drain-timeout-s, then abort the rest), tells the peers to stop and exits 0. A failed engine or
// a broken communicator exits 1 so the supervisor restarts the whole replica.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/grpc/server.h"
#include "common/shutdown_signals.h"
#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#if XSERV_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "worker/parallel/nccl_communicator.h"
#endif
#include "spdlog/spdlog.h"
#include "worker/engine/engine.h"
#include "worker/kernel_choices.h"
#include "worker/engine/peer_loop.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"
#include "worker/model/profile_forward.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/rendezvous_rpc_store.h"
#include "worker/service/rendezvous_store.h"
#include "worker/service/worker_service.h"

namespace xserv::worker {
namespace {

struct WorkerFlags {
  std::string model_dir;
  std::string backend = "cpu";
  bool batch_invariant = false;
  bool cuda_graphs = true;
  bool tp_cuda_graphs = true;
  bool pp_cuda_graphs = true;
  int64_t peer_all_reduce_max_bytes = 2 << 20;
  int64_t peer_one_shot_max_bytes = 2 << 20;  // two H200s: one-shot beat two-shot at every size
  KernelChoices kernels;
  bool fp8_matmuls = false;
  bool fp8_lm_head = false;
  bool pp_nccl = true;
  double step_timeout_s = -1;
  bool pp_overlap = true;
  bool overlap_scheduling = false;
  std::string quantization = "none";
  std::string host = "127.0.0.1";
  int port = 50061;
  std::string port_file;
  std::string served_model_name;
  int threads = 2;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 0;  // 0: StepTokenBudget
  int max_model_len = 0;  // 0: the model's max_position_embeddings
  int block_size = 16;
  double kv_cache_memory_gb = 0.5;
  double gpu_memory_utilization = 0.9;
  int num_kv_blocks = 0;  // > 0 overrides the memory-derived size (tests force tiny pools)
  double swap_space_gb = 1.0;
  std::string preemption_mode = "swap";
  std::string scheduling_policy = "fcfs";
  bool enable_prefix_caching = true;
  std::string window_kv_blocks = "auto";  // auto | on | off
  std::string kv_cache_dtype = "auto";    // auto (the compute dtype) | fp8 | fp8_e4m3
  int long_prefill_token_threshold = 0;
  int max_waiting_steps = 0;
  double drain_timeout_s = 30;
  // Rank layout of this process within its replica (TP x PP) and the replica's id.
  int tp_size = 1, tp_rank = 0, pp_size = 1, pp_rank = 0, replica_id = 0;
  std::string leader_address;  // host:port of the leader (peers only)
  uint64_t replica_epoch = 1;  // incarnation of the replica (the supervisor counts launches)
  double comm_timeout_s = 300;
};

// --max-num-batched-tokens as given, or for 0 engine::DefaultStepTokenBudget of this worker's
// device (the first visible one; none on the CPU backend).
int StepTokenBudget(const WorkerFlags& f) {
  if (f.max_num_batched_tokens > 0) return f.max_num_batched_tokens;
  uint64_t device_bytes = 0;
#if XSERV_HAVE_CUDA
  if (f.backend == "cuda") {
    const absl::StatusOr<cuda::RuntimeInfo> runtime = cuda::QueryRuntime();
    if (runtime.ok() && !runtime->devices.empty()) {
      device_bytes = runtime->devices.front().total_memory_bytes;
    }
  }
#endif
  return engine::DefaultStepTokenBudget(device_bytes);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

absl::StatusOr<std::unique_ptr<kernels::Backend>> CreateBackend(const WorkerFlags& f) {
  if (f.backend == "cpu") {
    return std::make_unique<kernels::cpu::CpuBackend>(
        kernels::cpu::CpuBackendOptions{.num_threads = f.threads});
  }
#if XSERV_HAVE_CUDA
  if (f.backend == "cuda") {
    auto runtime = cuda::QueryRuntime();
    if (runtime.ok()) spdlog::info("{}", cuda::Describe(*runtime));
    ASSIGN_OR_RETURN(auto backend, kernels::cuda::CudaBackend::Create(
                                       CudaOptionsOf(f.kernels, f.batch_invariant, f.fp8_matmuls)));
    return std::unique_ptr<kernels::Backend>(std::move(backend));
  }
#endif
  return absl::InvalidArgumentError("backend '" + f.backend + "' is not available in this build");
}

// --window-kv-blocks: whether sliding-window layers keep only their window's blocks (window tables,
// worker/engine/block_manager.h, and shared storage, KvLayout). The window tables cannot share
// prefixes, so `auto` turns them on only when prefix caching is off, and only where the shared
// storage halves a block: as many sliding layers as full ones, give or take one (gpt-oss's
// alternation). A sequence keeps its full table too, so with few full layers (say every layer
// sliding) its blocks would cost more, not less. Decided on the whole model, so every rank and
// pipeline stage agrees.
absl::StatusOr<bool> WindowKvBlocks(const WorkerFlags& f, const ModelConfig& config) {
  const bool has_sliding = config.sliding_window > 0;
  if (f.window_kv_blocks == "off") return false;
  if (f.window_kv_blocks == "auto") {
    int64_t sliding = 0;
    for (int64_t l = 0; l < config.num_layers; ++l) sliding += config.SlidingWindowForLayer(l) > 0;
    const int64_t full = config.num_layers - sliding;
    return has_sliding && !f.enable_prefix_caching && sliding > 0 && full > 0 &&
           std::max(sliding, full) <= std::min(sliding, full) + 1;
  }
  if (!has_sliding) {
    return absl::InvalidArgumentError(
        "--window-kv-blocks on: the model has no sliding-window layers");
  }
  if (f.enable_prefix_caching) {
    return absl::InvalidArgumentError(
        "--window-kv-blocks on needs --enable-prefix-caching false (window tables share no "
        "prefixes)");
  }
  return true;
}

// KV blocks that fit the budget: --num-kv-blocks, else --kv-cache-memory (CPU), else
// --gpu-memory-utilization of the device (CUDA, as vLLM) minus what is in use now (weights, and
// after ProfileForward whatever a largest step left allocated) minus `reserved_bytes` that the
// engine allocates later (logits, sampling and graph scratch).
int64_t KvBlocks(const WorkerFlags& f, int64_t bytes_per_block, int64_t reserved_bytes) {
  if (f.num_kv_blocks > 0) return f.num_kv_blocks;
#if XSERV_HAVE_CUDA
  if (f.backend == "cuda") {
    auto runtime = cuda::QueryRuntime();
    if (!runtime.ok() || runtime->devices.empty()) return 0;
    const cuda::DeviceInfo& d = runtime->devices[0];
    const double used = static_cast<double>(d.total_memory_bytes - d.free_memory_bytes);
    const double budget = f.gpu_memory_utilization * d.total_memory_bytes - used -
                          static_cast<double>(reserved_bytes);
    // Per-GPU memory of a layout (weights plus the largest step's activations) is read off this
    // line by the GPU benchmark scripts.
    spdlog::info("device memory before the KV cache: {:.2f} GiB in use of {:.2f} GiB",
                 used / (1 << 30), static_cast<double>(d.total_memory_bytes) / (1 << 30));
    return budget > 0 ? static_cast<int64_t>(budget) / bytes_per_block : 0;
  }
#endif
  (void)reserved_bytes;
  return static_cast<int64_t>(f.kv_cache_memory_gb * (1 << 30)) / bytes_per_block;
}

// The host's physical memory: pools larger than it are refused at the flag, not by
// std::bad_alloc later.
double HostMemoryGb() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<double>(sysconf(_SC_PAGE_SIZE)) / (1 << 30);
}

// Tokens per request: --max-model-len, or the model's max_position_embeddings; never more than
// the model allows, nor than the KV pool holds (one request must fit, as vLLM requires). An
// explicit --max-model-len the pool cannot hold is an error; the default shrinks, with a warning.
absl::StatusOr<int> MaxModelLen(const WorkerFlags& f, const ModelConfig& config,
                                int64_t num_blocks) {
  if (f.max_model_len == 1) return absl::InvalidArgumentError("--max-model-len must be >= 2");
  if (f.max_model_len > config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-model-len ", f.max_model_len, " exceeds the model's context of ",
                     config.max_position_embeddings, " tokens (max_position_embeddings)"));
  }
  const int64_t wanted = f.max_model_len > 0 ? f.max_model_len : config.max_position_embeddings;
  const int64_t pool_tokens = num_blocks * f.block_size;
  if (wanted <= pool_tokens) return static_cast<int>(wanted);
  const std::string pool = absl::StrCat("the KV pool holds ", pool_tokens, " tokens (",
                                        num_blocks, " blocks of ", f.block_size, ")");
  if (f.max_model_len > 0 || pool_tokens < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        pool, ", fewer than one request of ", wanted,
        " tokens needs: give the pool more memory (--gpu-memory-utilization, --kv-cache-memory, "
        "--num-kv-blocks) or lower --max-model-len"));
  }
  spdlog::warn("{}: the context is limited to that (the model allows {})", pool, wanted);
  return static_cast<int>(pool_tokens);
}

// A shutdown signal before this rank serves: nothing is in flight to drain, so it ends now, with
// the log flushed (std::_Exit runs no destructors: other threads may be inside a load or a
// collective).
[[noreturn]] void ExitBeforeServing(int sig, const char* why) {
  spdlog::info("signal {} {}: exiting", sig, why);
  spdlog::default_logger()->flush();
  std::_Exit(0);
}

// Rank arithmetic of a TP x PP replica: global rank = pp_rank * tp_size + tp_rank. The leader
// (scheduler, sampling, the router's endpoint) is TP rank 0 of the LAST stage, where the logits
// are: stage 0 embeds, the last stage samples.
int GlobalRank(const WorkerFlags& f) { return f.pp_rank * f.tp_size + f.tp_rank; }
int LeaderRank(const WorkerFlags& f) { return (f.pp_size - 1) * f.tp_size; }
bool IsLeader(const WorkerFlags& f) { return GlobalRank(f) == LeaderRank(f); }

absl::Status CheckLayout(const WorkerFlags& f) {
  if (f.tp_size < 1 || f.tp_rank < 0 || f.tp_rank >= f.tp_size) {
    return absl::InvalidArgumentError(absl::StrCat("--tp-rank ", f.tp_rank, " is outside [0, ",
                                                   f.tp_size, ")"));
  }
  if (f.pp_size < 1 || f.pp_rank < 0 || f.pp_rank >= f.pp_size) {
    return absl::InvalidArgumentError(absl::StrCat("--pp-rank ", f.pp_rank, " is outside [0, ",
                                                   f.pp_size, ")"));
  }
  if (f.overlap_scheduling && f.tp_size * f.pp_size > 1) {
    return absl::InvalidArgumentError(
        "--overlap-scheduling runs on single-rank replicas only (no --tp-size or --pp-size)");
  }
  if (f.comm_timeout_s < 5) {  // the idle leader's heartbeat comes every second
    return absl::InvalidArgumentError("--comm-timeout-s must be at least 5");
  }
  if (!IsLeader(f) && f.leader_address.empty()) {  // the leader itself never needs it
    return absl::InvalidArgumentError(
        "a peer rank needs --leader-address (the leader is TP rank 0 of the last stage)");
  }
  return absl::OkStatus();
}

// The replica's communicators: `world` spans every rank (step plans, pipeline hand-offs, KV
// agreement; Gloo, host memory), `tp` the ranks of this stage (the model's all-reduces: Gloo on
// the CPU backend, where one stage's two groups are one, NCCL on CUDA). With one rank there are
// none.
struct ReplicaGroups {
  std::unique_ptr<parallel::Communicator> world_owned, tp_owned, pipe_owned;
  parallel::Communicator* world = nullptr;
  parallel::Communicator* tp = nullptr;
  // CUDA with --pp-nccl: every rank in NCCL for the stage hand-off (device memory, on the
  // backend's stream); null: the hand-off goes through `world` and host memory.
  parallel::Communicator* pipe = nullptr;
};

// The leader's own view of the store it serves to its peers: no RPC to itself.
class LocalRendezvousKeyValueStore final : public parallel::KeyValueStore {
 public:
  explicit LocalRendezvousKeyValueStore(RendezvousStore& store) : store_(store) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return store_.Set(store_.epoch(), key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    ASSIGN_OR_RETURN(std::vector<std::string> values,
                     store_.Get(store_.epoch(), {key}, std::chrono::steady_clock::now() + timeout));
    return std::move(values[0]);
  }

 private:
  RendezvousStore& store_;
};

// Joins the groups. The Gloo rendezvous (and NCCL's id exchange) goes through the store the
// leader serves over its Rendezvous RPC (peers) or directly (the leader itself). `cuda_stream` is
// the CUDA backend's stream, null on the CPU backend.
absl::StatusOr<ReplicaGroups> JoinReplicaGroups(const WorkerFlags& f, RendezvousStore& local,
                                                void* cuda_stream) {
  ReplicaGroups groups;
  if (f.tp_size * f.pp_size == 1) return groups;
  spdlog::info("joining the replica as tp rank {}/{}, pp rank {}/{} (leader {}, epoch {})",
               f.tp_rank, f.tp_size, f.pp_rank, f.pp_size,
               IsLeader(f) ? std::string("this process") : f.leader_address, f.replica_epoch);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.comm_timeout_s * 1000));
  std::shared_ptr<parallel::KeyValueStore> store;
  if (IsLeader(f)) {
    store = std::make_shared<LocalRendezvousKeyValueStore>(local);
  } else {
    store = std::make_shared<parallel::RendezvousRpcKeyValueStore>(f.leader_address,
                                                                   f.replica_epoch, timeout);
  }
  const auto join = [&](int rank, int size, std::string prefix) {
    return parallel::CreateGlooCommunicator(parallel::GlooOptions{.rank = rank,
                                                                  .world_size = size,
                                                                  .interface_or_host = f.host,
                                                                  .store = store,
                                                                  .prefix = std::move(prefix),
                                                                  .timeout = timeout});
  };
  if (f.pp_size == 1 && cuda_stream == nullptr) {  // CPU, one stage: one group does it all
    ASSIGN_OR_RETURN(groups.tp_owned, join(f.tp_rank, f.tp_size, "tp"));
    groups.world = groups.tp = groups.tp_owned.get();
    return groups;
  }
  ASSIGN_OR_RETURN(groups.world_owned, join(GlobalRank(f), f.tp_size * f.pp_size, "world"));
  groups.world = groups.world_owned.get();
  if (f.tp_size > 1 && cuda_stream != nullptr) {
#if XSERV_HAVE_CUDA
    // Device all-reduces go through NCCL on the backend's stream; the world group stays Gloo
    // for host-side control (step plans, KV agreement, pipeline hand-offs).
    ASSIGN_OR_RETURN(groups.tp_owned,
                     parallel::CreateNcclCommunicator(parallel::NcclOptions{
                         .rank = f.tp_rank,
                         .world_size = f.tp_size,
                         .store = store,
                         .prefix = absl::StrCat("nccl-tp-", f.pp_rank),
                         .stream = cuda_stream,
                         .timeout = timeout,
                         .peer_max_bytes = f.peer_all_reduce_max_bytes,
                         .peer_one_shot_max_bytes = f.peer_one_shot_max_bytes}));
#endif
  } else if (f.tp_size > 1) {
    ASSIGN_OR_RETURN(groups.tp_owned,
                     join(f.tp_rank, f.tp_size, absl::StrCat("tp-", f.pp_rank)));
  }
  groups.tp = groups.tp_owned.get();
#if XSERV_HAVE_CUDA
  // Created after the TP groups on every rank (NCCL's init blocks until all of a group join).
  if (f.pp_size > 1 && f.pp_nccl && cuda_stream != nullptr) {
    ASSIGN_OR_RETURN(groups.pipe_owned,
                     parallel::CreateNcclCommunicator(parallel::NcclOptions{
                         .rank = GlobalRank(f),
                         .world_size = f.tp_size * f.pp_size,
                         .store = store,
                         .prefix = "nccl-pipe",
                         .stream = cuda_stream,
                         .timeout = timeout}));
    groups.pipe = groups.pipe_owned.get();
  }
#endif
  return groups;
}

// Steps the leader keeps in flight: one per pipeline stage, so that every stage has one to run.
int MaxInFlightSteps(const WorkerFlags& f) { return f.pp_overlap ? f.pp_size : 1; }

engine::PipelineLink LinkOf(const WorkerFlags& f, const ReplicaGroups& groups) {
  if (f.pp_size == 1) return {};
  return engine::PipelineLink{
      .comm = groups.pipe != nullptr ? groups.pipe : groups.world,
      .prev_rank = f.pp_rank > 0 ? GlobalRank(f) - f.tp_size : -1,
      .next_rank = f.pp_rank + 1 < f.pp_size ? GlobalRank(f) + f.tp_size : -1,
      .max_in_flight = MaxInFlightSteps(f)};
}

// Every rank must address the same block ids: the pool is the smallest any rank can hold.
absl::StatusOr<int64_t> AgreeOnMinimum(parallel::Communicator* comm, int64_t value) {
  if (comm == nullptr) return value;
  constexpr int64_t kExactInFloat = int64_t{1} << 24;
  std::array<float, 1> negated = {-static_cast<float>(std::min(value, kExactInFloat))};
  RETURN_IF_ERROR(comm->AllReduce(negated, parallel::ReduceOp::kMax));
  return static_cast<int64_t>(-negated[0]);
}

void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  std::ofstream(path + ".tmp") << port << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

// A peer rank: follows the leader's step plans until it says stop (exit 0) or the replica breaks
// (exit 1). Signals are left to the leader, which drains and then stops its peers.
template <typename Fail>
int RunPeer(const WorkerFlags& f, const engine::EngineConfig& ec, kernels::Backend& backend,
            model::Model& model, model::KvCache& kv, WorkerService& service,
            const WorkerIdentity& identity, int bound_port, Fail fail) {
  const int64_t block_size = kv.block_size();
  auto builder = model::BatchBuilder::Create(
      backend, model::BatchLimits{
                   .max_tokens = ec.scheduler.max_num_batched_tokens,
                   .max_seqs = ec.scheduler.max_num_seqs,
                   .max_blocks_per_seq = (ec.scheduler.max_model_len + block_size - 1) / block_size,
                   .block_size = block_size,
                   .window_tables = ec.scheduler.blocks.window_tokens > 0});
  // Only the last stage produces logits; other stages keep a placeholder.
  const int64_t logits_rows = model.is_last_stage() ? ec.scheduler.MaxLogitsRows() : 1;
  auto logits = backend.Allocate(kernels::DType::kF32,
                                 {logits_rows, model.is_last_stage() ? model.config().vocab_size
                                                                     : int64_t{1}});
  if (!builder.ok() || !logits.ok()) {
    spdlog::error("peer buffers: {}",
                  (builder.ok() ? logits.status() : builder.status()).ToString());
    return fail(1);
  }
  service.SetIdentity(identity);
  service.SetServing();
  WritePortFile(f.port_file, bound_port);
  spdlog::info("tp rank {}/{}, pp rank {}/{} following the leader", f.tp_rank, f.tp_size,
               f.pp_rank, f.pp_size);
  engine::DeviceStepRunner runner(backend, model, kv, *builder, *logits, ec.pipeline);
  // The leader's engine makes the same graphs with the same limits (SchedulerConfig::
  // MaxLogitsRows), whatever this stage's logits placeholder.
  const std::unique_ptr<model::DecodeGraphs> graphs =
      engine::MakeDecodeGraphs(ec, backend, model, kv, *builder);
  runner.set_graphs(graphs.get());
  engine::PeerLoopStats stats;
  // The loop runs on its own thread so this one keeps consuming SIGTERM/SIGINT (a signal nobody
  // waits for would be delivered to some library thread and kill the process mid-step); the
  // leader, signalled too, drains and then sends the stop that ends the loop.
  absl::Status status;
  std::atomic<bool> done = false;
  std::thread loop([&] {
    status = engine::RunPeerLoop(*ec.step_comm, ec.step_root, runner, &stats);
    done = true;
  });
  while (!done) {
    if (const int sig = WaitForShutdownSignal(std::chrono::milliseconds(100)); sig != 0) {
      if (stats.steps == 0 && stats.heartbeats == 0) {
        // Nothing heard from the leader: it is still starting (and exits on the same signal,
        // StartupSignalWatcher), so the stop this peer would wait for never comes.
        ExitBeforeServing(sig, "before the leader's first message");
      }
      spdlog::info("signal {}: this peer stops when the leader says so", sig);
    }
  }
  loop.join();
  if (!status.ok()) {
    spdlog::critical("peer loop failed after {} steps: {}", stats.steps.load(),
                     status.ToString());
    return fail(1);
  }
  spdlog::info("leader said stop after {} steps; stopped", stats.steps.load());
  return fail(0);
}

// Until the worker serves, SIGTERM / SIGINT end it at once: nothing is in flight to drain, and
// weight loading or a rendezvous can take minutes that the supervisor's grace period (after
// which it would SIGKILL) does not wait for. Its thread consumes the signals until destroyed,
// just before the serving loop takes over.
class StartupSignalWatcher {
 public:
  StartupSignalWatcher()
      : thread_([this] {
          while (!stop_) {
            if (const int sig = WaitForShutdownSignal(std::chrono::milliseconds(100)); sig != 0) {
              ExitBeforeServing(sig, "while starting");
            }
          }
        }) {}
  ~StartupSignalWatcher() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

int Run(const WorkerFlags& f) {
  if (const absl::Status layout = CheckLayout(f); !layout.ok()) {
    spdlog::error("{}", layout.ToString());
    return 2;
  }
  auto created = CreateBackend(f);
  if (!created.ok()) {
    spdlog::error("{}", created.status().ToString());
    return 2;
  }
  kernels::Backend& backend = **created;

  WorkerIdentity identity;
  identity.model_name = f.served_model_name.empty()
                            ? std::filesystem::path(f.model_dir).lexically_normal().filename().string()
                            : f.served_model_name;
  if (identity.model_name.empty()) {
    identity.model_name = std::filesystem::path(f.model_dir).parent_path().filename().string();
  }
  identity.config_json = ReadFile(f.model_dir + "/config.json").value_or("");
  identity.backend = backend.name();
  identity.dtype = std::string(kernels::DTypeName(backend.compute_dtype()));
  identity.layout.set_tp_size(f.tp_size);
  identity.layout.set_pp_size(f.pp_size);
  identity.layout.set_tp_rank(f.tp_rank);
  identity.layout.set_pp_rank(f.pp_rank);
  identity.layout.set_replica_id(f.replica_id);
  identity.block_size = f.block_size;
  auto watcher = std::make_unique<StartupSignalWatcher>();
  RendezvousStore store(f.replica_epoch);
  WorkerService service(nullptr, &store, identity);
  auto started = StartGrpcServer(f.host, f.port, {&service});
  if (!started.ok()) {
    spdlog::error("{}", started.status().ToString());
    return 1;
  }
  std::unique_ptr<grpc::Server> server = std::move(started->server);
  const int bound_port = started->port;
  spdlog::info("xserv.worker.v1.Worker on {}:{} (starting)", f.host, bound_port);
  const auto fail = [&](int code) {
    watcher.reset();  // a signal now must not turn this exit code into 0
    store.Shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return code;
  };

  void* cuda_stream = nullptr;
#if XSERV_HAVE_CUDA
  if (f.backend == "cuda") {
    cuda_stream = static_cast<kernels::cuda::CudaBackend&>(backend).stream();
  }
#endif
  auto groups = JoinReplicaGroups(f, store, cuda_stream);
  if (!groups.ok()) {
    spdlog::error("joining the replica: {}", groups.status().ToString());
    return fail(1);
  }
  auto model = model::LoadModel(f.model_dir, backend,
                                model::ModelLoadOptions{.max_num_tokens = f.max_num_batched_tokens,
                                                        .tp_rank = f.tp_rank,
                                                        .tp_size = f.tp_size,
                                                        .tp_comm = groups->tp,
                                                        .pp_rank = f.pp_rank,
                                                        .pp_size = f.pp_size,
                                                        // The FP8 checkpoints' block.
                                                        .quantize_fp8_block =
                                                            f.quantization == "fp8" ? 128 : 0,
                                                        .fp8_matmuls = f.backend == "cuda" &&
                                                                       f.fp8_matmuls,
                                                        .fp8_lm_head = f.fp8_lm_head,
                                                        .max_positions = f.max_model_len,
                                                        .on_progress = [&](uint64_t loaded,
                                                                           uint64_t total) {
                                                          service.SetLoadProgress(loaded, total);
                                                        }});
  if (!model.ok()) {
    spdlog::error("loading {}: {}", f.model_dir, model.status().ToString());
    return fail(1);
  }
  const ModelConfig config = (*model)->config();
  const ModelConfig& rank_config = (*model)->rank_config();
  const absl::StatusOr<bool> window_kv = WindowKvBlocks(f, config);
  if (!window_kv.ok()) {
    spdlog::error("{}", std::string(window_kv.status().message()));
    return fail(1);
  }
  const model::KvLayout kv_layout{.fp8 = f.kv_cache_dtype != "auto",
                                  .share_window_layers = *window_kv,
                                  .first_layer = (*model)->first_layer()};
  const int64_t bytes_per_block = model::KvCache::BytesPerBlock(rank_config, f.block_size,
                                                                backend.compute_dtype(), kv_layout);
  if (f.backend == "cuda" && f.pp_size == 1) {
    // The largest step once, before free memory is measured (model/profile_forward.h).
    const absl::Status profiled = model::ProfileForward(backend, **model, f.max_num_batched_tokens,
                                                        f.block_size);
    if (!profiled.ok()) {
      spdlog::error("profiling forward of {} tokens: {}", f.max_num_batched_tokens,
                    profiled.ToString());
      return fail(1);
    }
  }
  // Allocated after sizing: the engine's f32 logits rows, plus sampling / attention / graph
  // scratch that grows with the first steps.
  const int64_t logits_rows = std::min<int64_t>(f.max_num_batched_tokens, f.max_num_seqs);
  const int64_t reserved = logits_rows * config.vocab_size * 4 + (int64_t{256} << 20);
  auto num_blocks = AgreeOnMinimum(groups->world, KvBlocks(f, bytes_per_block, reserved));
  auto host_blocks = AgreeOnMinimum(
      groups->world, static_cast<int64_t>(f.swap_space_gb * (1 << 30)) / bytes_per_block);
  if (!num_blocks.ok() || !host_blocks.ok()) {
    spdlog::error("agreeing on the KV pool: {}",
                  (num_blocks.ok() ? host_blocks.status() : num_blocks.status()).ToString());
    return fail(1);
  }
  if (*num_blocks < 1) {
    spdlog::error("the KV budget holds no block of {} bytes", bytes_per_block);
    return fail(1);
  }
  const absl::StatusOr<int> context = MaxModelLen(f, config, *num_blocks);
  if (!context.ok()) {
    spdlog::error("{}", std::string(context.status().message()));
    return fail(1);
  }
  const int max_model_len = *context;
  auto kv = model::KvCache::Allocate(backend, rank_config, *num_blocks, f.block_size, *host_blocks,
                                     kv_layout);
  if (!kv.ok()) {
    spdlog::error("KV cache: {}", kv.status().ToString());
    return fail(1);
  }
  spdlog::info("model {} ({}): {} layers, vocab {}, context {}; rank {}/{}: KV {} blocks x {} "
               "tokens ({:.1f} MiB{}), swap {} blocks{}",
               f.model_dir, config.model_type, config.num_layers, config.vocab_size,
               max_model_len, f.tp_rank, f.tp_size, *num_blocks, f.block_size,
               *num_blocks * bytes_per_block / 1048576.0, kv_layout.fp8 ? ", FP8 E4M3" : "",
               *host_blocks, *window_kv ? "; sliding-window layers keep their window's blocks" : "");

  engine::EngineConfig ec;
  ec.scheduler.max_num_seqs = f.max_num_seqs;
  ec.scheduler.max_num_batched_tokens = f.max_num_batched_tokens;
  ec.scheduler.max_model_len = max_model_len;
  ec.scheduler.long_prefill_token_threshold = f.long_prefill_token_threshold;
  ec.scheduler.max_waiting_steps = f.max_waiting_steps;
  ec.scheduler.preemption_mode = f.preemption_mode == "recompute"
                                     ? engine::PreemptionMode::kRecompute
                                     : engine::PreemptionMode::kSwap;
  if (f.scheduling_policy == "priority") ec.scheduler.policy = engine::PriorityPolicy{};
  ec.scheduler.blocks.num_device_blocks = static_cast<int32_t>(*num_blocks);
  ec.scheduler.blocks.block_size = f.block_size;
  ec.scheduler.blocks.num_host_blocks = static_cast<int32_t>(*host_blocks);
  ec.scheduler.blocks.enable_prefix_caching = f.enable_prefix_caching;
  if (*window_kv) ec.scheduler.blocks.window_tokens = static_cast<int32_t>(config.sliding_window);
  ec.step_comm = groups->world;
  ec.step_root = LeaderRank(f);
  ec.pipeline = LinkOf(f, *groups);
  ec.graphs = f.backend == "cuda" && f.cuda_graphs;
  ec.graphs_with_collectives = f.tp_cuda_graphs;
  ec.graphs_with_pipeline = f.pp_cuda_graphs;
  ec.scheduler.max_in_flight_steps = f.overlap_scheduling ? 2 : MaxInFlightSteps(f);
  ec.scheduler.overlap_decodes = f.overlap_scheduling;
  for (int64_t id : config.eos_token_ids) ec.eos_token_ids.push_back(static_cast<int32_t>(id));
  identity.eos_token_ids = ec.eos_token_ids;
  identity.kv_capacity_blocks = *num_blocks;
  identity.kv_cache_dtype = kv_layout.fp8 ? "fp8_e4m3" : absl::AsciiStrToLower(identity.dtype);

  if (!IsLeader(f)) {
    watcher.reset();  // the peer's own loop handles signals from here
    return RunPeer(f, ec, backend, **model, *kv, service, identity, bound_port, fail);
  }

  engine::SteadyClock clock;
  auto engine = engine::Engine::Create(ec, backend, std::move(*model),
                                       std::make_unique<model::KvCache>(std::move(*kv)), &clock);
  if (!engine.ok()) {
    spdlog::error("engine: {}", engine.status().ToString());
    return fail(1);
  }
  service.SetStepTimeout(f.step_timeout_s >= 0 ? f.step_timeout_s
                                               : (f.backend == "cuda" ? 120.0 : 0.0));
  service.SetEngine(engine->get(), identity);
  (*engine)->Start();
  watcher.reset();  // the serving loop below handles signals from here
  service.SetServing();
  WritePortFile(f.port_file, bound_port);
  spdlog::info("serving xserv.worker.v1.Worker on {}:{}", f.host, bound_port);

  int exit_code = 0;
  while (true) {
    const int sig = WaitForShutdownSignal(std::chrono::milliseconds(200));
    if (sig != 0) {
      spdlog::info("signal {}: draining", sig);
      break;
    }
    if (!(*engine)->failure().ok()) {
      spdlog::critical("engine failed, exiting: {}", (*engine)->failure().ToString());
      exit_code = 1;
      break;
    }
  }
  service.SetDraining();
  (*engine)->Drain();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.drain_timeout_s * 1000));
  while (exit_code == 0 && (*engine)->num_live_requests() > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  store.Shutdown();
  (*engine)->Stop();  // aborts whatever is left (their streams get a final ABORT); peers stop
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  spdlog::info("stopped");
  return exit_code;
}

}  // namespace
}  // namespace xserv::worker

int main(int argc, char** argv) {
  xserv::BlockShutdownSignals();  // before any thread exists: every thread inherits the mask

  CLI::App app{"xserv-worker: serves a model over the internal Worker gRPC service"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  xserv::worker::WorkerFlags f;
  app.add_option("--model", f.model_dir, "HF model directory (config.json + safetensors)")
      ->required();
  app.add_option("--backend", f.backend, "cpu or cuda")->capture_default_str();
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "fraction of device memory for weights + KV (cuda)")
      ->check(xserv::NumberIn(0.01, 1))
      ->capture_default_str();
  app.add_option("--batch-invariant", f.batch_invariant,
                 "cuda: matmul results independent of batch composition, so concurrent greedy "
                 "requests are reproducible (costs some speed)")
      ->capture_default_str();
  app.add_option("--quantization", f.quantization,
                 "fp8: quantise the checkpoint's linear weights (and gpt-oss experts) to FP8 E4M3 "
                 "with 128x128 block scales on load, as the FP8 checkpoints are made; computed in "
                 "the compute dtype for now (FP8 GEMMs: issue 15)")
      ->check(CLI::IsMember({"none", "fp8"}))
      ->capture_default_str();
  app.add_option("--pp-overlap", f.pp_overlap,
                 "leader: keep one step in flight per pipeline stage so that the stages work "
                 "concurrently (each step takes its share of the running requests)")
      ->capture_default_str();
  app.add_option("--overlap-scheduling", f.overlap_scheduling,
                 "plan and prepare step N+1 while step N runs on the device; N+1's decodes take "
                 "N's tokens once sampled (docs/overlap-scheduling.md; single-rank replicas)")
      ->capture_default_str();
  app.add_option("--cuda-graphs", f.cuda_graphs,
                 "cuda: replay decode steps as CUDA graphs (single-GPU replicas)")
      ->capture_default_str();
  app.add_option("--step-timeout-s", f.step_timeout_s,
                 "health turns FAILED while one engine step runs longer than this (the supervisor "
                 "then restarts the replica); 0: never; -1: 120 on cuda, never on cpu")
      ->check(xserv::NumberIn(-1, 1e7))
      ->capture_default_str();
  app.add_option("--pp-nccl", f.pp_nccl,
                 "cuda: pipeline stages hand hidden states over with NCCL send/recv on the "
                 "compute stream (no host copy); false: through host memory")
      ->capture_default_str();
  app.add_option("--fp8-matmuls", f.fp8_matmuls,
                 "cuda, experimental: keep FP8 weights (an FP8 checkpoint or --quantization fp8) "
                 "as FP8 and multiply them directly (W8A16: half the weight bytes at <= 8 rows, "
                 "more traffic above); false decodes them to bf16 at load")
      ->capture_default_str();
  app.add_option("--fp8-lm-head", f.fp8_lm_head,
                 "quantise the lm_head to FP8 E4M3 too (128x128 blocks, on load; an FP8 "
                 "checkpoint's is bf16), kept FP8 with --fp8-matmuls: half the bytes of the step's "
                 "largest weight; logits move by FP8's rounding (docs/quantization.md)")
      ->capture_default_str();
  AddKernelChoiceFlags(app, f.kernels);
  app.add_option("--pp-cuda-graphs", f.pp_cuda_graphs,
                 "cuda: decode graphs on pipeline stages too (each stage's NCCL receive, layers "
                 "and send captured; only with --pp-nccl; every rank must run it)")
      ->capture_default_str();
  app.add_option("--peer-all-reduce-max-bytes", f.peer_all_reduce_max_bytes,
                 "cuda, TP: bf16 all-reduces of at most this many bytes run over buffers the "
                 "GPUs map from each other (CUDA IPC) instead of NCCL; 0: NCCL only; ranks with "
                 "other values fall back to NCCL")
      ->capture_default_str();
  app.add_option("--peer-one-shot-max-bytes", f.peer_one_shot_max_bytes,
                 "cuda, TP: peer all-reduces up to this size read every rank's whole message "
                 "(one-shot), larger ones reduce a slice each and gather (two-shot); ranks with "
                 "other values fall back to NCCL")
      ->capture_default_str();
  app.add_option("--tp-cuda-graphs", f.tp_cuda_graphs,
                 "cuda: decode graphs on tensor-parallel replicas too (NCCL all-reduces "
                 "captured; every rank must run it)")
      ->capture_default_str();
  app.add_option("--host", f.host, "listen address")->capture_default_str();
  app.add_option("--port", f.port, "listen port (0: any free port)")->capture_default_str();
  app.add_option("--port-file", f.port_file, "write the bound port here once serving");
  app.add_option("--served-model-name", f.served_model_name, "default: the directory name");
  app.add_option("--threads", f.threads, "CPU backend threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-num-seqs", f.max_num_seqs)
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "tokens a step may hold (prompt chunks + decode rows); 0: 8192 on a GPU of at "
                 "least 70 GiB, else 2048")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--max-model-len", f.max_model_len,
                 "tokens per request, prompt and output (0: the model's maximum, or what the KV "
                 "pool holds if less)")
      ->check(CLI::Range(0, std::numeric_limits<int32_t>::max()))
      ->capture_default_str();
  app.add_option("--block-size", f.block_size)->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--kv-cache-memory", f.kv_cache_memory_gb, "KV pool size in GiB (CPU backend)")
      ->check(xserv::NumberIn(0, xserv::worker::HostMemoryGb()))
      ->capture_default_str();
  app.add_option("--num-kv-blocks", f.num_kv_blocks, "exact KV pool size in blocks (overrides)");
  app.add_option("--swap-space-gb", f.swap_space_gb, "host swap pool for preemption (0: off)")
      ->check(xserv::NumberIn(0, xserv::worker::HostMemoryGb()))
      ->capture_default_str();
  app.add_option("--preemption-mode", f.preemption_mode)
      ->check(CLI::IsMember({"swap", "recompute"}))
      ->capture_default_str();
  app.add_option("--scheduling-policy", f.scheduling_policy)
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  app.add_option("--enable-prefix-caching", f.enable_prefix_caching)->capture_default_str();
  app.add_option("--window-kv-blocks", f.window_kv_blocks,
                 "sliding-window layers keep only their window's KV blocks: on, off, or auto "
                 "(on when prefix caching is off and about half the layers slide, as in gpt-oss)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "KV cache element type: auto (the compute dtype) or fp8 (= fp8_e4m3: E4M3 codes "
                 "with a scale per token and kv head, made as the keys and values are written)")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto" || v == "fp8" || v == "fp8_e4m3") return "";
        if (v == "fp8_e5m2") return "fp8_e5m2 is not supported; use fp8 (E4M3 with scales)";
        return "must be auto, fp8 or fp8_e4m3, not '" + v + "'";
      })
      ->capture_default_str();
  app.add_option("--long-prefill-token-threshold", f.long_prefill_token_threshold)
      ->capture_default_str();
  app.add_option("--max-waiting-steps", f.max_waiting_steps,
                 "while requests run, new ones wait up to this many steps to start together "
                 "(sooner when they fill a step's token budget); 0: every step admits")
      ->capture_default_str();
  app.add_option("--drain-timeout-s", f.drain_timeout_s)
      ->check(xserv::NumberIn(0, 1e7))
      ->capture_default_str();
  app.add_option("--tp-size", f.tp_size, "tensor-parallel ranks in this replica")
      ->capture_default_str();
  app.add_option("--tp-rank", f.tp_rank)->capture_default_str();
  app.add_option("--pp-size", f.pp_size, "pipeline stages in this replica")->capture_default_str();
  app.add_option("--pp-rank", f.pp_rank)->capture_default_str();
  app.add_option("--replica-id", f.replica_id, "reported in Info")->capture_default_str();
  app.add_option("--leader-address", f.leader_address,
                 "host:port of the replica's leader, TP rank 0 of the last stage (required on "
                 "every other rank)");
  app.add_option("--replica-epoch", f.replica_epoch,
                 "incarnation of the replica; peers of another epoch are refused")
      ->capture_default_str();
  app.add_option("--comm-timeout-s", f.comm_timeout_s,
                 "longest wait in a collective (rendezvous included) before the rank gives up")
      ->check(xserv::NumberIn(5, 1e7))
      ->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-worker")) return *code;
  f.max_num_batched_tokens = xserv::worker::StepTokenBudget(f);
  return xserv::worker::Run(f);
}
