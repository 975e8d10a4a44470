// CudaBackend::Sample: rows whose answer is the plain arg-max (greedy, nothing adjusted, no
// logprobs) take the arg-max kernel and bring back one id each; otherwise the specs go to the
// device with their adjustments, sampling.cu runs one CTA per row, and the small per-row results
// come back. Either way R x V logits never cross to the host.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/op_util.h"
#include "kernels/cuda/sampling.h"

namespace xserv::kernels::cuda {
namespace {

static_assert(kMaxDeviceLogprobs == kMaxSampleLogprobs);

bool OnlyArgMax(const SampleRowSpec& s) {
  return s.mode == SampleMode::kSkip || (s.mode == SampleMode::kDraw && s.greedy() &&
                                          s.adjustments.empty() && s.num_logprobs < 0);
}

DeviceSampleRow ToDevice(const SampleRowSpec& s, int32_t adjustments_begin) {
  return DeviceSampleRow{.mode = static_cast<int32_t>(s.mode),
                         .target = s.target,
                         .top_k = s.top_k,
                         .num_logprobs = s.num_logprobs,
                         .temperature = s.temperature,
                         .top_p = s.top_p,
                         .min_p = s.min_p,
                         .repetition_penalty = s.repetition_penalty,
                         .presence_penalty = s.presence_penalty,
                         .frequency_penalty = s.frequency_penalty,
                         .seed = s.seed,
                         .counter = s.counter,
                         .adjustments_begin = adjustments_begin,
                         .adjustments_count = static_cast<int32_t>(s.adjustments.size())};
}

SampleRowResult FromDevice(const DeviceSampleResult& d) {
  SampleRowResult r;
  r.token = d.token;
  r.logprob = d.logprob;
  r.rank = d.rank;
  r.num_top = std::clamp(d.num_top, 0, kMaxSampleLogprobs);
  std::copy_n(d.top_ids, r.num_top, r.top_ids);
  std::copy_n(d.top_logprobs, r.num_top, r.top_logprobs);
  return r;
}

}  // namespace

absl::Status CudaBackend::Sample(const Tensor& logits, std::span<const SampleRowSpec> rows,
                                 std::span<SampleRowResult> results) {
  constexpr const char* kOp = "Sample";
  RETURN_IF_ERROR(ExpectCuda(kOp, "logits", logits));
  RETURN_IF_ERROR(ExpectSampleOperands(logits, rows, results.size()));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "rows", logits.dim(0)));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "vocab", logits.dim(1)));
  const auto num_rows = static_cast<int64_t>(rows.size());
  if (num_rows == 0) return absl::OkStatus();

  if (std::all_of(rows.begin(), rows.end(), OnlyArgMax)) {
    RETURN_IF_ERROR(Reserve(sample_results_, num_rows * sizeof(int32_t)));
    const Tensor ids =
        MakeTensor(sample_results_.view().data, DType::kI32, DeviceType::kCuda, {num_rows});
    RETURN_IF_ERROR(ArgMax(logits, ids));
    std::vector<int32_t> host(static_cast<size_t>(num_rows));
    RETURN_IF_ERROR(CopyToHost(ids, host.data()));
    for (int64_t r = 0; r < num_rows; ++r) {
      results[r] = SampleRowResult{};
      if (rows[r].mode == SampleMode::kDraw) results[r].token = host[r];
    }
    return absl::OkStatus();
  }

  std::vector<DeviceSampleRow> device_rows;
  std::vector<DeviceAdjustment> adjustments;
  device_rows.reserve(rows.size());
  for (const SampleRowSpec& s : rows) {
    const bool adjusted = s.mode == SampleMode::kDraw;
    device_rows.push_back(ToDevice(s, static_cast<int32_t>(adjustments.size())));
    if (!adjusted) {
      device_rows.back().adjustments_count = 0;
      continue;
    }
    for (const TokenAdjustment& a : s.adjustments) {
      adjustments.push_back(DeviceAdjustment{
          .token = a.token,
          .bias = a.bias,
          .output_count = a.output_count,
          .flags = (a.banned ? kAdjustBanned : 0) | (a.seen ? kAdjustSeen : 0)});
    }
  }
  RETURN_IF_ERROR(ExpectIntRange(kOp, "adjustments", static_cast<int64_t>(adjustments.size())));
  const size_t rows_bytes = device_rows.size() * sizeof(DeviceSampleRow);
  const size_t adjust_bytes = adjustments.size() * sizeof(DeviceAdjustment);
  const size_t saved_bytes = adjustments.size() * sizeof(float);
  const size_t results_bytes = rows.size() * sizeof(DeviceSampleResult);
  RETURN_IF_ERROR(Reserve(sample_rows_, rows_bytes));
  RETURN_IF_ERROR(Reserve(sample_adjustments_, adjust_bytes + saved_bytes));
  RETURN_IF_ERROR(Reserve(sample_results_, results_bytes));
  auto* d_rows = static_cast<DeviceSampleRow*>(sample_rows_.view().data);
  auto* d_adjust = static_cast<DeviceAdjustment*>(sample_adjustments_.view().data);
  // The saved raw logits follow the adjustments (16-byte records, so the floats stay aligned).
  auto* d_saved = reinterpret_cast<float*>(d_adjust + adjustments.size());
  auto* d_results = static_cast<DeviceSampleResult*>(sample_results_.view().data);
  // Pageable sources: staged before the call returns, so the host vectors may go.
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(d_rows, device_rows.data(), rows_bytes,
                                       cudaMemcpyHostToDevice, stream_));
  if (adjust_bytes > 0) {
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(d_adjust, adjustments.data(), adjust_bytes,
                                         cudaMemcpyHostToDevice, stream_));
  }
  RETURN_IF_ERROR(
      Launched(kOp, LaunchSample(AsRows(logits), d_rows, d_adjust, d_saved, d_results, stream_)));
  std::vector<DeviceSampleResult> host(rows.size());
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host.data(), d_results, results_bytes,
                                       cudaMemcpyDeviceToHost, stream_));
  RETURN_IF_ERROR(Synchronize());
  for (size_t r = 0; r < rows.size(); ++r) {
    results[r] = rows[r].mode == SampleMode::kSkip ? SampleRowResult{} : FromDevice(host[r]);
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cuda
