// Per-architecture loaders behind LoadModel (model.cc). Internal to worker/model.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/model.h"
#include "worker/model/weight_loader.h"

namespace xserv::model {

absl::StatusOr<std::unique_ptr<Model>> LoadLlamaFamily(const ModelConfig& config,
                                                       WeightLoader& loader,
                                                       kernels::Backend& backend,
                                                       const ModelLoadOptions& options);
absl::StatusOr<std::unique_ptr<Model>> LoadGpt2(const ModelConfig& config, WeightLoader& loader,
                                                kernels::Backend& backend,
                                                const ModelLoadOptions& options);
absl::StatusOr<std::unique_ptr<Model>> LoadGptOss(const ModelConfig& config, WeightLoader& loader,
                                                  kernels::Backend& backend,
                                                  const ModelLoadOptions& options);

}  // namespace xserv::model
