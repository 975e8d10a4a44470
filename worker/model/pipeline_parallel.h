// Pipeline parallelism as the model files see it: which contiguous layers a stage holds, and the
// checkpoint tensors it deliberately leaves to the other stages.
//
//   stage s of P over L layers holds L / P layers, plus one when s < L % P (earlier stages take
//   the remainder), starting after the layers of stages 0..s-1
//   first stage: the embedding (and GPT-2's positions);  last stage: final norm and lm_head (and
//   the embedding again when the lm_head is tied to it);  every stage: RoPE table, workspace
//
// Stages hand each other the residual stream [T, H] (Model::Forward's `hidden`). Plain values,
// built once at load; internal to worker/model.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/model_config/model_config.h"
#include "worker/model/weight_loader.h"

namespace xserv::model {

struct ModelLoadOptions;

struct PpStage {
  int rank = 0;
  int size = 1;
  int64_t first_layer = 0;  // global index of this stage's first layer
  int64_t num_layers = 0;   // layers this stage holds

  // The stage ModelLoadOptions asks for over `total_layers` (checked by ValidatePipelineParallel).
  static PpStage FromOptions(const ModelLoadOptions& options, int64_t total_layers);

  bool first() const { return rank == 0; }
  bool last() const { return rank == size - 1; }
};

// InvalidArgument naming the numbers when pp_rank is outside [0, pp_size) or the model has fewer
// layers than stages (a stage without layers would only forward its input).
absl::Status ValidatePipelineParallel(const ModelConfig& config, const ModelLoadOptions& options);

// Marks the layers of every other stage ("<prefix><i>.", e.g. "model.layers.7.") as deliberately
// not loaded, so WeightLoader::Finish still reports anything else it did not expect.
void IgnoreOtherStagesLayers(WeightLoader& loader, const PpStage& stage, int64_t total_layers,
                             const std::string& prefix);

}  // namespace xserv::model
