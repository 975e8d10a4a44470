#include "worker/model/model.h"

#include "absl/strings/str_cat.h"
#include "common/model_config/config_parser.h"
#include "common/status.h"
#include "worker/model/architectures.h"
#include "worker/model/tensor_parallel.h"

namespace xserv::model {

void Model::Observe(int64_t layer, const char* what, const kernels::Tensor& activation) const {
  if (!observer_) return;
  observer_(layer < 0 ? std::string(what) : "layers." + std::to_string(layer) + "." + what,
            activation);
}

absl::Status Model::CheckInputs(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                                const kernels::Tensor& logits) const {
  const int64_t tokens = in.token_ids.rank == 1 ? in.token_ids.dim(0) : -1;
  if (tokens < 1 || tokens > max_num_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", tokens,
                                                   " tokens, workspace holds 1..", max_num_tokens_));
  }
  if (in.positions.rank != 1 || in.positions.dim(0) != tokens) {
    return absl::InvalidArgumentError("Forward: positions must be [tokens]");
  }
  if (static_cast<int64_t>(kv.size()) != config_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", kv.size(), " KV layers for ",
                                                   config_.num_layers, " model layers"));
  }
  const int64_t rows = in.logits_indices.rank == 1 ? in.logits_indices.dim(0) : -1;
  if (rows < 0 || rows > tokens || logits.rank != 2 || logits.dim(0) != rows ||
      logits.dim(1) != config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Forward: logits must be [", rows, ", ", config_.vocab_size, "], got ", logits.Describe()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& dir, kernels::Backend& backend,
                                                 const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir + "/config.json"));
  RETURN_IF_ERROR(ValidateTensorParallel(config, options));
  if (options.tp_size > 1 && backend.device() != kernels::DeviceType::kCpu) {
    // Refused at start-up rather than at the first step: AllReduceSum (layers.cc) only hands
    // host memory to the communicator so far; the device route (NCCL) lifts this.
    return absl::UnimplementedError(absl::StrCat("tensor parallelism on the ", backend.name(),
                                                 " backend is not wired yet (AllReduceSum)"));
  }
  ASSIGN_OR_RETURN(WeightLoader loader, WeightLoader::Open(dir, backend));
  std::unique_ptr<Model> model;
  switch (config.architecture) {
    case Architecture::kLlama:
    case Architecture::kMistral:
    case Architecture::kQwen2:
    case Architecture::kQwen3: {
      ASSIGN_OR_RETURN(model, LoadLlamaFamily(config, loader, backend, options));
      break;
    }
    case Architecture::kGpt2: {
      ASSIGN_OR_RETURN(model, LoadGpt2(config, loader, backend, options));
      break;
    }
    case Architecture::kGptOss: {
      ASSIGN_OR_RETURN(model, LoadGptOss(config, loader, backend, options));
      break;
    }
  }
  RETURN_IF_ERROR(loader.Finish());
  return model;
}

}  // namespace xserv::model
