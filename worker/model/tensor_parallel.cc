#include "worker/model/tensor_parallel.h"

#include "absl/strings/str_cat.h"
#include "worker/model/model.h"

namespace xserv::model {

TpShard TpShard::FromOptions(const ModelLoadOptions& o) {
  return TpShard{.rank = o.tp_rank, .size = o.tp_size, .comm = o.tp_size > 1 ? o.tp_comm : nullptr};
}

TensorSlice TpShard::Split(int dim, int64_t extent) const {
  return TensorSlice{
      .dim = dim, .ranges = {{.begin = rank * extent / size, .end = (rank + 1) * extent / size}}};
}

TensorSlice TpShard::Blocks(int dim, int64_t begin, int64_t end, int64_t unit) {
  return TensorSlice{.dim = dim, .ranges = {{.begin = begin * unit, .end = end * unit}}};
}

int64_t TpShard::KvHeadsPerRank(const ModelConfig& c) const {
  return c.num_kv_heads % size == 0 ? c.num_kv_heads / size : 1;
}

int64_t TpShard::KvHeadBegin(const ModelConfig& c) const {
  if (c.num_kv_heads % size == 0) return rank * (c.num_kv_heads / size);
  // Replicated: ranks [j * size / kv, (j + 1) * size / kv) all hold KV head j, the one their
  // q heads [rank * heads / size, ...) attend with under GQA.
  return rank / (size / c.num_kv_heads);
}

absl::Status ValidateTensorParallel(const ModelConfig& c, const ModelLoadOptions& o) {
  const int size = o.tp_size;
  if (size < 1 || o.tp_rank < 0 || o.tp_rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: tp_rank ", o.tp_rank,
                                                   " outside [0, tp_size ", size, ")"));
  }
  if (size == 1) return absl::OkStatus();
  if (c.num_heads % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: num_attention_heads ",
                                                   c.num_heads, " is not divisible by tp_size ",
                                                   size));
  }
  if (c.num_kv_heads % size != 0 && size % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: num_key_value_heads ",
                                                   c.num_kv_heads, " and tp_size ", size,
                                                   " must divide one another"));
  }
  if (c.intermediate_size % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: intermediate_size ",
                                                   c.intermediate_size,
                                                   " is not divisible by tp_size ", size));
  }
  if (o.tp_comm == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: tp_size ", size, " needs a communicator (ModelLoadOptions::tp_comm)"));
  }
  if (o.tp_comm->world_size() != size || o.tp_comm->rank() != o.tp_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: communicator is rank ", o.tp_comm->rank(), " of ",
                     o.tp_comm->world_size(), ", options say tp_rank ", o.tp_rank, " of ", size));
  }
  return absl::OkStatus();
}

ModelConfig RankConfig(const ModelConfig& c, const TpShard& tp) {
  ModelConfig rank = c;
  rank.num_heads = c.num_heads / tp.size;
  rank.num_kv_heads = tp.KvHeadsPerRank(c);
  rank.intermediate_size = c.intermediate_size / tp.size;
  return rank;
}

}  // namespace xserv::model
