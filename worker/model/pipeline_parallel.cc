#include "worker/model/pipeline_parallel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/model/model.h"

namespace xserv::model {

PpStage PpStage::FromOptions(const ModelLoadOptions& o, int64_t total_layers) {
  const int64_t base = total_layers / o.pp_size, extra = total_layers % o.pp_size;
  return PpStage{.rank = o.pp_rank,
                 .size = o.pp_size,
                 .first_layer = o.pp_rank * base + std::min<int64_t>(o.pp_rank, extra),
                 .num_layers = base + (o.pp_rank < extra ? 1 : 0)};
}

absl::Status ValidatePipelineParallel(const ModelConfig& c, const ModelLoadOptions& o) {
  if (o.pp_size < 1 || o.pp_rank < 0 || o.pp_rank >= o.pp_size) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline parallelism: pp_rank ", o.pp_rank,
                                                   " outside [0, pp_size ", o.pp_size, ")"));
  }
  if (o.pp_size > c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline parallelism: pp_size ", o.pp_size,
                                                   " exceeds the model's ", c.num_layers,
                                                   " layers"));
  }
  return absl::OkStatus();
}

void IgnoreOtherStagesLayers(WeightLoader& loader, const PpStage& stage, int64_t total_layers,
                             const std::string& prefix) {
  for (int64_t i = 0; i < total_layers; ++i) {
    if (i >= stage.first_layer && i < stage.first_layer + stage.num_layers) continue;
    loader.IgnorePrefix(absl::StrCat(prefix, i, "."));
  }
}

}  // namespace xserv::model
