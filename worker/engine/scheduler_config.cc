#include "worker/engine/scheduler_config.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::engine {

int32_t DefaultStepTokenBudget(uint64_t device_bytes) {
  constexpr uint64_t kLargeDeviceBytes = uint64_t{70} << 30;
  return device_bytes >= kLargeDeviceBytes ? 8192 : 2048;
}

absl::Status SchedulerConfig::Validate() const {
  RETURN_IF_ERROR(blocks.Validate());
  if (max_num_seqs < 1) return absl::InvalidArgumentError("max_num_seqs must be >= 1");
  if (max_num_batched_tokens < 1) {
    return absl::InvalidArgumentError("max_num_batched_tokens must be >= 1");
  }
  if (max_model_len < 2) return absl::InvalidArgumentError("max_model_len must be >= 2");
  if (long_prefill_token_threshold < 0) {
    return absl::InvalidArgumentError("long_prefill_token_threshold must be >= 0");
  }
  if (max_waiting_steps < 0) return absl::InvalidArgumentError("max_waiting_steps must be >= 0");
  if (admission_watermark < 0.f || admission_watermark >= 1.f) {
    return absl::InvalidArgumentError("admission_watermark must be in [0, 1)");
  }
  if (max_in_flight_steps < 1 || max_in_flight_steps > 64) {
    return absl::InvalidArgumentError("max_in_flight_steps must be in [1, 64]");
  }
  if (overlap_decodes && max_in_flight_steps != 2) {
    return absl::InvalidArgumentError("overlap_decodes needs max_in_flight_steps == 2");
  }
  // Without chunking a prompt is scheduled whole; a longer one could never start.
  if (!enable_chunked_prefill && max_num_batched_tokens < max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "without chunked prefill, max_num_batched_tokens (", max_num_batched_tokens,
        ") must be >= max_model_len (", max_model_len, ")"));
  }
  return absl::OkStatus();
}

}  // namespace xserv::engine
