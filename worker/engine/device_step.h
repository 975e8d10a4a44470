// DeviceStep: the device side of one engine step, as every tensor-parallel rank must perform it —
// KV block moves (swap out, copy-on-write copies, swap in), then one forward pass over the
// scheduled chunks. The leader derives it from the scheduler's StepPlan, broadcasts it serialised
// over the replica's communicator (the "step plan" of ARCHITECTURE.md §1: no RPC per step), and
// every rank executes the same one. Sampling stays on the leader: it alone reads the logits.
//
// kIdle keeps peers' collectives from timing out while the leader has nothing to run; kStop ends
// the peers' loops when the leader stops.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/batch_builder.h"
#include "worker/model/decode_graphs.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"
#include "worker/parallel/communicator.h"

namespace xserv::engine {

struct DeviceChunk {
  std::vector<int32_t> tokens;
  int32_t start_position = 0;
  std::vector<int32_t> block_table;
  model::LogitsRows logits = model::LogitsRows::kLast;
};

struct DeviceStep {
  enum class Kind : uint8_t { kRun = 0, kIdle = 1, kStop = 2 };
  Kind kind = Kind::kRun;
  std::vector<std::pair<int32_t, int32_t>> swap_out, copies, swap_in;
  std::vector<DeviceChunk> chunks;

  // Logits rows the forward pass produces: all tokens of kAll chunks, one per kLast chunk.
  int64_t LogitsRowCount() const;
};

// Compact little-endian encoding; Parse refuses truncated or inconsistent bytes with
// InvalidArgument (a peer never trusts a half-received plan).
std::string SerializeDeviceStep(const DeviceStep& step);
absl::StatusOr<DeviceStep> ParseDeviceStep(std::string_view bytes);

// This rank's neighbours in the replica's pipeline: a stage other than the first receives the
// step's hidden states [T, H] from `prev_rank`, one other than the last sends its output to
// `next_rank` (ranks of `comm`, which spans every rank of the replica; the same TP rank of the
// adjacent stage). Empty for a single-stage replica.
struct PipelineLink {
  parallel::Communicator* comm = nullptr;
  int prev_rank = -1;
  int next_rank = -1;
  // Steps the leader may have in flight (SchedulerConfig::max_in_flight_steps, the same on every
  // rank): a stage may finish that many before the next stage takes the first one's output, so
  // it keeps as many sends pending (a smaller number deadlocks the pipeline).
  int max_in_flight = 1;
};

// Runs `step` on this rank: block moves, then (when it has chunks) the forward pass of this
// rank's layers. On the last stage the logits land in `logits` (grown when a step needs more
// rows) and are returned; other stages return an empty tensor.
class DeviceStepRunner {
 public:
  DeviceStepRunner(kernels::Backend& backend, model::Model& model, model::KvCache& kv,
                   model::BatchBuilder& builder, kernels::Buffer& logits, PipelineLink link = {})
      : backend_(backend), model_(model), kv_(kv), builder_(builder), logits_(logits),
        link_(link) {}

  absl::StatusOr<kernels::Tensor> Run(const DeviceStep& step);

  // Decode-only steps go through `graphs` when it accepts them (not owned; null: never).
  void set_graphs(model::DecodeGraphs* graphs) { graphs_ = graphs; }

  // Waits until the last step's output has reached the next stage (before this rank stops).
  absl::Status Finish();

 private:
  // Hidden states between stages travel through host memory (any backend; the NCCL path of the
  // CUDA issue sends device buffers instead).
  absl::Status ReceiveHidden(const kernels::Tensor& hidden, int tag);
  absl::Status SendHidden(const kernels::Tensor& hidden, int tag);

  kernels::Backend& backend_;
  model::Model& model_;
  model::KvCache& kv_;
  model::BatchBuilder& builder_;
  kernels::Buffer& logits_;
  PipelineLink link_;
  model::DecodeGraphs* graphs_ = nullptr;
  kernels::Buffer hidden_;            // [max tokens, H], allocated on the first pipelined step
  std::vector<std::byte> staging_;       // host copy of the hidden states received
  // Host copies of the hidden states sent, a ring of link.max_in_flight (sends may be pending).
  std::vector<std::vector<std::byte>> send_staging_;
  size_t num_sent_ = 0;
  int64_t forward_steps_ = 0;         // identical on every rank: the p2p tag
};

}  // namespace xserv::engine
