// Launchers of the sampling kernels (sampling.cu): per-row logit adjustments, the draw and raw
// logprobs, as kernels/sampling.h defines them. Host API only, C++17 (the .cu side cannot see
// <span>): CudaBackend::Sample (ops_sampling.cc) validates, packs the specs into these plain
// structs and unpacks the results.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

inline constexpr int kMaxDeviceLogprobs = 20;  // = kMaxSampleLogprobs

// SampleRowSpec with its adjustments as a range of the step's adjustment array.
struct DeviceSampleRow {
  int32_t mode = 0;  // SampleMode
  int32_t target = 0;
  int32_t top_k = 0;
  int32_t num_logprobs = -1;
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  uint64_t counter = 0;
  int32_t adjustments_begin = 0;
  int32_t adjustments_count = 0;
};

inline constexpr int32_t kAdjustBanned = 1;
inline constexpr int32_t kAdjustSeen = 2;

struct DeviceAdjustment {
  int32_t token = 0;
  float bias = 0.0f;
  int32_t output_count = 0;
  int32_t flags = 0;  // kAdjustBanned | kAdjustSeen
};

// Same fields as SampleRowResult.
struct DeviceSampleResult {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  int32_t num_top = 0;
  int32_t top_ids[kMaxDeviceLogprobs] = {};
  float top_logprobs[kMaxDeviceLogprobs] = {};
};

// One CTA per row of f32 `logits` (modified in place while adjusted, restored before the logprobs
// are taken). `saved` holds one float per adjustment (the raw logits while adjusted). All pointers
// are device memory.
cudaError_t LaunchSample(const RowsView& logits, const DeviceSampleRow* rows,
                         const DeviceAdjustment* adjustments, float* saved,
                         DeviceSampleResult* results, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
