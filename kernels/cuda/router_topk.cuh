// RouterTopK's selection as one warp's device code, shared by its kernel (softmax.cu) and the
// MXFP4 experts' GEMV that selects its own experts (moe_mxfp4.cu, MoeRoute): the same rounds give
// the same ids and weights bit for bit.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace xserv::kernels::cuda {

// k rounds of a warp arg-max over one row of `experts` logits (lane owns experts lane + 32 i,
// i < kPerLane), each over the experts not yet taken; ties go to the lower id, so every lane
// agrees on each round's winner. on_select(j, id, logit) runs on every lane for round j's
// winner; NaN logits never win, and a round without a winner reports id INT_MAX, logit -inf.
template <int kPerLane, typename OnSelect>
__device__ __forceinline__ void WarpTopKRounds(const float* logits, int experts, int k, int lane,
                                               OnSelect&& on_select) {
  static_assert(kPerLane >= 1 && kPerLane <= 32, "taken is a 32-bit mask");
  float vals[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kWarpSize;
    vals[i] = e < experts ? logits[e] : -INFINITY;
  }
  uint32_t taken = 0;  // bit i: expert lane + 32 * i already selected
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int best_id = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kWarpSize;
      const bool better = vals[i] > best || (vals[i] == best && e < best_id);
      if (e < experts && !(taken >> i & 1u) && better) best = vals[i], best_id = e;
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(kFullMask, best, offset);
      const int other_id = __shfl_xor_sync(kFullMask, best_id, offset);
      if (other > best || (other == best && other_id < best_id)) best = other, best_id = other_id;
    }
    if (best_id % kWarpSize == lane) taken |= 1u << (best_id / kWarpSize);
    on_select(j, best_id, best);
  }
}

}  // namespace xserv::kernels::cuda
