#include "worker/model/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/model_config/config_parser.h"
#include "common/status.h"
#include "worker/model/architectures.h"
#include "worker/model/pipeline_parallel.h"
#include "worker/model/tensor_parallel.h"

namespace xserv::model {
namespace {

// The lm_head's FP8 block when no --quantization block is given: the FP8 checkpoints' (and the
// W8A8 GEMM's) 128.
constexpr int64_t kFp8LmHeadBlock = 128;

}  // namespace

Model::Model(ModelConfig config, ModelConfig rank_config, const ModelLoadOptions& options)
    : config_(std::move(config)),
      rank_config_(std::move(rank_config)),
      tp_rank_(options.tp_rank),
      tp_size_(options.tp_size),
      max_num_tokens_(options.max_num_tokens),
      // At least one full step's positions too: ProfileForward runs a sequence of
      // max_num_tokens tokens from position 0, whatever the context.
      max_positions_(
          options.max_positions > 0
              ? std::min(std::max<int64_t>(options.max_positions, options.max_num_tokens),
                         config_.max_position_embeddings)
              : config_.max_position_embeddings),
      pp_rank_(options.pp_rank),
      pp_size_(options.pp_size) {
  const PpStage stage = PpStage::FromOptions(options, config_.num_layers);
  first_layer_ = static_cast<int>(stage.first_layer);
  num_local_layers_ = static_cast<int>(stage.num_layers);
  rank_config_.num_layers = stage.num_layers;  // so the KV cache holds only this stage's layers
}

void Model::Observe(int64_t layer, const char* what, const kernels::Tensor& activation) const {
  if (!observer_) return;
  observer_(layer < 0 ? std::string(what) : "layers." + std::to_string(layer) + "." + what,
            activation);
}

absl::Status Model::CheckInputs(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                                const kernels::Tensor& logits, const kernels::Tensor* hidden,
                                kernels::DType compute_dtype) const {
  const int64_t tokens = in.token_ids.rank == 1 ? in.token_ids.dim(0) : -1;
  if (tokens < 1 || tokens > max_num_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", tokens,
                                                   " tokens, workspace holds 1..", max_num_tokens_));
  }
  if (in.positions.rank != 1 || in.positions.dim(0) != tokens) {
    return absl::InvalidArgumentError("Forward: positions must be [tokens]");
  }
  if (static_cast<int64_t>(kv.size()) != num_local_layers_) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", kv.size(), " KV layers for ",
                                                   num_local_layers_, " model layers"));
  }
  if (!is_first_stage() || !is_last_stage()) {
    const std::string where = absl::StrCat("Forward: pipeline stage ", pp_rank_, " of ", pp_size_);
    if (hidden == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, " needs hidden states"));
    }
    if (hidden->rank != 2 || hidden->dim(0) != tokens || hidden->dim(1) != config_.hidden_size ||
        hidden->dtype != compute_dtype || !hidden->is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": hidden must be contiguous ", std::string(kernels::DTypeName(compute_dtype)),
          " [", tokens, ", ", config_.hidden_size, "], got ", hidden->Describe()));
    }
  }
  if (!is_last_stage()) return absl::OkStatus();  // no logits before the last stage
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
  RETURN_IF_ERROR(ValidatePipelineParallel(config, options));
  if (options.tp_comm != nullptr && options.tp_size > 1) {
    // Refused at start-up rather than at the first step: the all-reduces hand the communicator
    // the backend's own memory (host for the CPU backend, device for CUDA: NCCL).
    const bool device_backend = backend.device() != kernels::DeviceType::kCpu;
    const bool device_comm = options.tp_comm->memory() == parallel::MemoryKind::kDevice;
    if (device_backend != device_comm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor parallelism on the ", backend.name(), " backend needs a ",
          device_backend ? "device (NCCL)" : "host (Gloo)", " communicator"));
    }
  }
  ASSIGN_OR_RETURN(WeightLoader loader, WeightLoader::Open(dir, backend));
  loader.set_progress(options.on_progress);
  if (config.quantization.method == QuantMethod::kFp8) {
    loader.set_fp8_block_size(config.quantization.weight_block_size);
  }
  if (options.quantize_fp8_block > 0) {
    if (config.architecture == Architecture::kGpt2 ||
        config.quantization.method == QuantMethod::kFp8) {
      return absl::InvalidArgumentError(
          config.architecture == Architecture::kGpt2
              ? "FP8 quantisation on load is for the Llama family and gpt-oss, not GPT-2"
              : "the checkpoint is FP8 already; drop --quantization fp8");
    }
    loader.set_quantize_fp8_block(options.quantize_fp8_block);
  }
  if (options.fp8_lm_head) {
    if (config.architecture == Architecture::kGpt2 || config.tie_word_embeddings) {
      return absl::InvalidArgumentError(
          "--fp8-lm-head needs a separate lm_head; this model's is its token embedding (tied)");
    }
    loader.set_quantize_lm_head_fp8_block(
        options.quantize_fp8_block > 0 ? options.quantize_fp8_block : kFp8LmHeadBlock);
  }
  loader.set_fp8_matmuls(options.fp8_matmuls);
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
