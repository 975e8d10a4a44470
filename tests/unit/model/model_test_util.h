// Test helpers for running models on the CPU backend: golden loading and a tiny step driver that
// stands in for the engine (sequences with their own shuffled physical blocks).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "common/safetensors/safetensors_file.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/model/batch_builder.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"

namespace xserv::model::testing {

inline std::string ModelDir(const std::string& name) {
  return std::string(XSERV_SOURCE_DIR) + "/tests/data/models/" + name;
}

struct Golden {
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::vector<float>> logits;  // [n * vocab] per input
  std::vector<std::vector<int32_t>> greedy;
  std::vector<std::vector<float>> margins;
};

inline Golden LoadGolden(const std::string& dir) {
  Golden g;
  auto file = safetensors::SafetensorsFile::Open(dir + "/golden.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return g;
  auto ints = [&](const std::string& name) {
    auto v = file->Tensor(name);
    std::vector<int32_t> out(v->NumElements());
    std::memcpy(out.data(), v->data.data(), v->data.size());
    return out;
  };
  auto floats = [&](const std::string& name) {
    auto v = file->Tensor(name);
    std::vector<float> out(v->NumElements());
    EXPECT_TRUE(safetensors::ConvertToFloat(v->dtype, v->data, out).ok());
    return out;
  };
  for (int i = 0; file->Tensor("input_ids." + std::to_string(i)).ok(); ++i) {
    const std::string s = std::to_string(i);
    g.inputs.push_back(ints("input_ids." + s));
    g.logits.push_back(floats("logits." + s));
    g.greedy.push_back(ints("greedy." + s));
    g.margins.push_back(floats("margin." + s));
  }
  return g;
}

// max |a - b| / max |b| over one row of `vocab` values.
inline double RowRelativeError(const float* a, const float* b, int64_t vocab) {
  double diff = 0, scale = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    diff = std::max(diff, std::abs(static_cast<double>(a[v]) - b[v]));
    scale = std::max(scale, std::abs(static_cast<double>(b[v])));
  }
  return diff / std::max(scale, 1e-30);
}

// A model on the CPU backend with a KV pool and per-sequence block tables.
class Harness {
 public:
  explicit Harness(const std::string& dir, int64_t num_blocks = 64, int64_t block_size = 16)
      : Harness(dir, ModelLoadOptions{.max_num_tokens = 256}, /*num_threads=*/2, num_blocks,
                block_size) {}

  // `options` may name a tensor-parallel rank; its KV cache then holds the rank's KV heads. The
  // shuffled block order is the same on every rank, as an engine's would be. `fuse_norms`:
  // CpuBackendOptions::fuse_norm_matmul.
  Harness(const std::string& dir, const ModelLoadOptions& options, int num_threads,
          int64_t num_blocks = 64, int64_t block_size = 16, const KvLayout& kv_layout = {},
          bool fuse_norms = false)
      : backend_(kernels::cpu::CpuBackendOptions{.num_threads = num_threads,
                                                 .fuse_norm_matmul = fuse_norms}) {
    auto model = LoadModel(dir, backend_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return;
    model_ = std::move(*model);
    auto kv = KvCache::Allocate(backend_, model_->rank_config(), num_blocks, block_size,
                                /*num_host_blocks=*/0, kv_layout);
    EXPECT_TRUE(kv.ok()) << kv.status();
    kv_ = std::make_unique<KvCache>(std::move(*kv));
    auto builder = BatchBuilder::Create(
        backend_, BatchLimits{.max_tokens = 256, .max_seqs = 16, .max_blocks_per_seq = 32,
                              .block_size = block_size});
    EXPECT_TRUE(builder.ok()) << builder.status();
    builder_ = std::make_unique<BatchBuilder>(std::move(*builder));
    free_blocks_.resize(num_blocks);
    std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), std::mt19937(42));
  }

  bool ok() const { return model_ != nullptr && kv_ != nullptr && builder_ != nullptr; }
  Model& model() { return *model_; }
  int64_t vocab() const { return model_->config().vocab_size; }

  // A block table with room for `tokens` tokens, from the shuffled free list.
  std::vector<int32_t> NewTable(int64_t tokens) {
    std::vector<int32_t> table;
    for (int64_t n = 0; n < tokens; n += kv_->block_size()) {
      table.push_back(free_blocks_.back());
      free_blocks_.pop_back();
    }
    return table;
  }

  // Runs one step; returns logits rows (flattened) in BatchBuilder order. A pipeline stage
  // (ModelLoadOptions::pp_size > 1) exchanges its residual stream through `hidden`, host floats
  // [T * H] as an engine stages them: a non-first stage reads its input there, a non-last one
  // writes its output there and returns no logits.
  std::vector<float> Step(const std::vector<SequenceChunk>& chunks,
                          std::vector<float>* hidden = nullptr) {
    auto in = builder_->Build(chunks);
    EXPECT_TRUE(in.ok()) << in.status();
    if (!in.ok()) return {};
    const bool first = model_->is_first_stage(), last = model_->is_last_stage();
    const int64_t tokens = in->token_ids.dim(0), width = model_->config().hidden_size;
    kernels::Tensor hidden_rows;
    if (!first || !last) {
      EXPECT_NE(hidden, nullptr) << "a pipeline stage needs hidden states";
      if (hidden == nullptr) return {};
      if (hidden_.empty()) {
        auto buffer = backend_.Allocate(backend_.compute_dtype(), {256, width});
        EXPECT_TRUE(buffer.ok()) << buffer.status();
        if (!buffer.ok()) return {};
        hidden_ = std::move(*buffer);
      }
      hidden_rows = hidden_.view().SliceRows(0, tokens);
      if (!first) {
        EXPECT_EQ(static_cast<int64_t>(hidden->size()), tokens * width);
        if (static_cast<int64_t>(hidden->size()) != tokens * width) return {};
        EXPECT_TRUE(backend_.CopyFromHost(hidden->data(), hidden_rows).ok());
      }
    }
    const int64_t rows = last ? in->logits_indices.dim(0) : 0;
    kernels::Buffer logits;
    if (last) {
      auto buffer = backend_.Allocate(kernels::DType::kF32, {rows, vocab()});
      EXPECT_TRUE(buffer.ok());
      if (!buffer.ok()) return {};
      logits = std::move(*buffer);
    }
    const absl::Status status =
        model_->Forward(*in, kv_->layers(), last ? logits.view() : kernels::Tensor{},
                        hidden_rows.empty() ? nullptr : &hidden_rows);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return {};
    if (!last) {
      hidden->resize(static_cast<size_t>(tokens * width));
      EXPECT_TRUE(backend_.CopyToHost(hidden_rows, hidden->data()).ok());
      return {};
    }
    std::vector<float> host(rows * vocab());
    EXPECT_TRUE(backend_.CopyToHost(logits.view(), host.data()).ok());
    return host;
  }

 private:
  kernels::cpu::CpuBackend backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<BatchBuilder> builder_;
  kernels::Buffer hidden_;  // [256, H], pipeline stages only
  std::vector<int32_t> free_blocks_;
};

inline int32_t Argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

// A (f32) weight or activation buffer's values on the host.
inline std::vector<float> ToHost(kernels::Backend& backend, const kernels::Buffer& buffer) {
  std::vector<float> host(static_cast<size_t>(buffer.view().numel()));
  EXPECT_TRUE(backend.CopyToHost(buffer.view(), host.data()).ok());
  return host;
}

}  // namespace xserv::model::testing
