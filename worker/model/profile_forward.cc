#include "worker/model/profile_forward.h"

#include <algorithm>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/model/batch_builder.h"
#include "worker/model/kv_cache.h"

namespace xserv::model {

absl::Status ProfileForward(kernels::Backend& backend, Model& model, int64_t max_tokens,
                            int64_t block_size) {
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return absl::FailedPreconditionError("ProfileForward runs one-stage replicas only");
  }
  const int64_t tokens = std::min<int64_t>(max_tokens, model.max_num_tokens());
  const int64_t blocks = (tokens + block_size - 1) / block_size;
  ASSIGN_OR_RETURN(KvCache kv, KvCache::Allocate(backend, model.rank_config(), blocks, block_size));
  ASSIGN_OR_RETURN(BatchBuilder builder,
                   BatchBuilder::Create(backend, BatchLimits{.max_tokens = tokens,
                                                             .max_seqs = 1,
                                                             .max_blocks_per_seq = blocks,
                                                             .block_size = block_size}));
  ASSIGN_OR_RETURN(kernels::Buffer logits,
                   backend.Allocate(kernels::DType::kF32, {1, model.config().vocab_size}));
  std::vector<int32_t> ids(static_cast<size_t>(tokens), 0), table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
  const SequenceChunk chunk{.tokens = ids, .start_position = 0, .block_table = table,
                            .logits = LogitsRows::kLast};
  ASSIGN_OR_RETURN(ForwardInputs in, builder.Build(std::span<const SequenceChunk>(&chunk, 1)));
  RETURN_IF_ERROR(model.Forward(in, kv.layers(), logits.view()));
  return backend.Synchronize();
}

}  // namespace xserv::model
