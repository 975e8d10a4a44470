#include "worker/tools/scorer.h"

#include <algorithm>
#include <exception>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace xserv::tools {
namespace {

using Json = nlohmann::json;

// Strict "better" order of (id, logprob) pairs: higher value, then lower id.
bool Better(const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
  return a.second > b.second || (a.second == b.second && a.first < b.first);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Json Error(const std::string& message) { return Json{{"error", message}}; }

// Parses {"ids": [int, ...]} into ids, or returns the error reply.
std::optional<Json> ParseRequest(std::string_view line, std::vector<int64_t>& ids) {
  const Json request = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return Error("line is not valid JSON");
  if (!request.is_object()) return Error("line must be a JSON object");
  auto field = request.find("ids");
  if (field == request.end() || !field->is_array()) {
    return Error("expected an array field \"ids\"");
  }
  ids.clear();
  ids.reserve(field->size());
  for (const Json& id : *field) {
    if (!id.is_number_integer()) return Error("\"ids\" must hold integers");
    if (id.is_number_unsigned()) {
      const uint64_t value = id.get<uint64_t>();
      if (value > static_cast<uint64_t>(INT64_MAX)) return Error("token id out of range");
      ids.push_back(static_cast<int64_t>(value));
    } else {
      ids.push_back(id.get<int64_t>());
    }
  }
  return std::nullopt;
}

Json ScoresToJson(const TokenScores& scores) {
  Json logprobs = Json::array();
  for (const std::optional<float>& lp : scores.logprobs) {
    logprobs.push_back(lp ? Json(*lp) : Json(nullptr));
  }
  Json top = Json::array();
  for (const auto& row : scores.top) {
    Json alternatives = Json::array();
    for (const auto& [id, lp] : row) alternatives.push_back(Json::array({id, lp}));
    top.push_back(std::move(alternatives));
  }
  return Json{{"logprobs", std::move(logprobs)}, {"top", std::move(top)}};
}

}  // namespace

std::vector<std::pair<int32_t, float>> TopK(std::span<const float> values, int k) {
  k = std::clamp<int>(k, 0, static_cast<int>(values.size()));
  std::vector<std::pair<int32_t, float>> heap;  // the k best so far; heap top is the worst
  heap.reserve(static_cast<size_t>(k) + 1);
  if (k == 0) return heap;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::pair<int32_t, float> candidate(static_cast<int32_t>(i), values[i]);
    if (static_cast<int>(heap.size()) < k) {
      heap.push_back(candidate);
      std::push_heap(heap.begin(), heap.end(), Better);
    } else if (Better(candidate, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), Better);
      heap.back() = candidate;
      std::push_heap(heap.begin(), heap.end(), Better);
    }
  }
  std::sort(heap.begin(), heap.end(), Better);
  return heap;
}

absl::StatusOr<std::unique_ptr<Scorer>> Scorer::Create(const std::string& model_dir,
                                                       kernels::Backend& backend,
                                                       const ScorerOptions& options) {
  if (options.chunk_tokens < 1 || options.block_size < 1) {
    return absl::InvalidArgumentError("Scorer: chunk_tokens and block_size must be positive");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m,
                   model::LoadModel(model_dir, backend,
                                    model::ModelLoadOptions{.max_num_tokens = options.chunk_tokens}));
  const ModelConfig& c = m->config();
  ASSIGN_OR_RETURN(
      model::BatchBuilder builder,
      model::BatchBuilder::Create(
          backend, model::BatchLimits{
                       .max_tokens = options.chunk_tokens,
                       .max_seqs = 1,
                       .max_blocks_per_seq = CeilDiv(c.max_position_embeddings, options.block_size),
                       .block_size = options.block_size}));
  ASSIGN_OR_RETURN(kernels::Buffer logits,
                   backend.Allocate(kernels::DType::kF32, {options.chunk_tokens, c.vocab_size}));
  return std::unique_ptr<Scorer>(
      new Scorer(backend, options, std::move(m), std::move(builder), std::move(logits)));
}

absl::Status Scorer::CheckIds(std::span<const int64_t> ids) const {
  const ModelConfig& c = config();
  if (ids.empty()) return absl::InvalidArgumentError("\"ids\" is empty");
  if (static_cast<int64_t>(ids.size()) > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(ids.size(), " tokens exceed the model's ",
                                                   c.max_position_embeddings, " positions"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("ids[", i, "] = ", ids[i],
                                                     " is outside the vocabulary [0, ",
                                                     c.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Scorer::EnsureKvBlocks(int64_t blocks) {
  if (kv_ != nullptr && kv_->num_blocks() >= blocks) return absl::OkStatus();
  // Grow geometrically so a stream of slowly lengthening inputs reallocates rarely.
  int64_t num_blocks = kv_ != nullptr ? kv_->num_blocks() : 16;
  while (num_blocks < blocks) num_blocks *= 2;
  num_blocks = std::min(num_blocks,
                        CeilDiv(config().max_position_embeddings, options_.block_size));
  num_blocks = std::max(num_blocks, blocks);
  kv_.reset();  // free the old pool before allocating the larger one
  ASSIGN_OR_RETURN(model::KvCache kv,
                   model::KvCache::Allocate(*backend_, config(), num_blocks, options_.block_size));
  kv_ = std::make_unique<model::KvCache>(std::move(kv));
  return absl::OkStatus();
}

absl::StatusOr<TokenScores> Scorer::Score(std::span<const int64_t> ids, int top_k) {
  RETURN_IF_ERROR(CheckIds(ids));
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = config().vocab_size;
  const int64_t blocks = CeilDiv(n, options_.block_size);
  RETURN_IF_ERROR(EnsureKvBlocks(blocks));
  std::vector<int32_t> block_table(static_cast<size_t>(blocks));
  std::iota(block_table.begin(), block_table.end(), 0);
  const std::vector<int32_t> tokens(ids.begin(), ids.end());

  TokenScores scores;
  scores.logprobs.assign(static_cast<size_t>(n), std::nullopt);
  scores.top.resize(static_cast<size_t>(n));
  for (int64_t start = 0; start < n; start += options_.chunk_tokens) {
    const int64_t rows = std::min<int64_t>(options_.chunk_tokens, n - start);
    // Each chunk attends to the KV written by the earlier ones: one prefill, split in time.
    const model::SequenceChunk chunk{
        .tokens = std::span<const int32_t>(tokens).subspan(start, rows),
        .start_position = static_cast<int32_t>(start),
        .block_table = block_table,
        .logits = model::LogitsRows::kAll};
    ASSIGN_OR_RETURN(model::ForwardInputs inputs, builder_.Build({&chunk, 1}));
    const kernels::Tensor logits = logits_.view().SliceRows(0, rows);
    RETURN_IF_ERROR(model_->Forward(inputs, kv_->layers(), logits));
    RETURN_IF_ERROR(backend_->LogSoftmax(logits, logits));
    host_logprobs_.resize(static_cast<size_t>(rows * vocab));
    RETURN_IF_ERROR(backend_->CopyToHost(logits, host_logprobs_.data()));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = start + r;
      const std::span<const float> row(host_logprobs_.data() + r * vocab, vocab);
      if (pos + 1 < n) scores.logprobs[pos + 1] = row[ids[pos + 1]];
      scores.top[pos] = TopK(row, top_k);
    }
  }
  return scores;
}

std::string ScoreJsonLine(Scorer& scorer, std::string_view line, int top_k) {
  try {  // the adapter boundary: nlohmann may throw (e.g. bad_alloc); callers get a reply
    std::vector<int64_t> ids;
    if (std::optional<Json> error = ParseRequest(line, ids)) return error->dump();
    absl::StatusOr<TokenScores> scores = scorer.Score(ids, top_k);
    if (!scores.ok()) return Error(std::string(scores.status().message())).dump();
    return ScoresToJson(*scores).dump();
  } catch (const std::exception& e) {
    return Error(absl::StrCat("internal error: ", e.what())).dump();
  }
}

}  // namespace xserv::tools
