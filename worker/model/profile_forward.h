// ProfileForward: one forward pass at the largest step shape a worker will run (max_tokens
// tokens of one sequence, with a throw-away KV pool just big enough), before the KV pool is sized
// from the device's free memory. It proves that shape fits, and whatever the backend allocates
// lazily on a first run (GEMM plans, scratch) is in place when the free memory is measured, as
// vLLM's profiling run does.
//
// Every rank of a tensor-parallel group must call it together (the pass all-reduces); one-stage
// replicas only (a pipeline stage would need its neighbours' hidden states).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "worker/model/model.h"

namespace xserv::model {

absl::Status ProfileForward(kernels::Backend& backend, Model& model, int64_t max_tokens,
                            int64_t block_size);

}  // namespace xserv::model
