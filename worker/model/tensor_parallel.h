// Tensor parallelism (Megatron split) as the model files see it: which heads, KV heads and MLP
// features this rank holds, and the slices of the checkpoint that hold them.
//
//   column-parallel (split the output rows): q, k, v, gate, up, GPT-2 c_attn / c_fc, gpt-oss
//                                            experts' gate_up; their biases and the attention sinks
//   row-parallel (split the input columns):  o, down, GPT-2 c_proj's, gpt-oss experts' down;
//                                            the partial outputs are summed (AllReduceSum) and the
//                                            bias is loaded on rank 0 only, so it is added once
//   replicated:                              embeddings, norms, QK-norm, router, lm_head
//
// KV heads: with num_kv_heads % tp_size == 0 each rank holds its own num_kv_heads / tp_size;
// with tp_size % num_kv_heads == 0 (more ranks than KV heads) each rank holds the one KV head its
// q heads attend with, so each KV head is replicated on tp_size / num_kv_heads ranks (as vLLM).
//
// Plain values, built once at load; internal to worker/model.
#pragma once

#include "absl/status/status.h"
#include "common/model_config/model_config.h"
#include "worker/model/weight_loader.h"
#include "worker/parallel/communicator.h"

namespace xserv::model {

struct ModelLoadOptions;

struct TpShard {
  int rank = 0;
  int size = 1;
  parallel::Communicator* comm = nullptr;  // null when size == 1

  // The shard ModelLoadOptions asks for (checked by ValidateTensorParallel).
  static TpShard FromOptions(const ModelLoadOptions& options);

  bool sharded() const { return size > 1; }
  // This rank's even share [rank * n / size, (rank + 1) * n / size) of `extent` along `dim`.
  TensorSlice Split(int dim, int64_t extent) const;
  // `unit`-sized blocks [begin, end) * unit along `dim` (e.g. heads of head_dim rows).
  static TensorSlice Blocks(int dim, int64_t begin, int64_t end, int64_t unit);
  // The KV heads [begin, end) this rank holds (see the file comment on replication).
  int64_t KvHeadBegin(const ModelConfig& config) const;
  int64_t KvHeadsPerRank(const ModelConfig& config) const;
};

// InvalidArgument naming the offending dimension when the options cannot split `config`: rank
// outside [0, tp_size), missing communicator (or one whose rank / size disagree), heads, KV heads
// or intermediate size not divisible.
absl::Status ValidateTensorParallel(const ModelConfig& config, const ModelLoadOptions& options);

// `config` with num_heads, num_kv_heads and intermediate_size of one rank's shard.
ModelConfig RankConfig(const ModelConfig& config, const TpShard& tp);

}  // namespace xserv::model
