#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"

namespace xserv::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// NaN-safe argmax: NaNs never win; ties go to the lowest id.
int32_t Argmax(std::span<const float> v) {
  int32_t best = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) continue;
    if (best < 0 || v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best < 0 ? 0 : best;
}

void ApplyPenalties(std::vector<float>& logits, const SamplingParams& p,
                    const SamplingContext& ctx) {
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    auto mark = [&](std::span<const int32_t> ids) {
      for (int32_t id : ids) {
        if (id >= 0 && static_cast<size_t>(id) < logits.size()) seen[id] = true;
      }
    };
    mark(ctx.prompt_tokens);
    mark(ctx.output_tokens);
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!seen[i]) continue;
      logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty
                                : logits[i] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    absl::flat_hash_map<int32_t, int32_t> counts;
    for (int32_t id : ctx.output_tokens) ++counts[id];
    for (const auto& [id, count] : counts) {
      if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }
}

}  // namespace

double UniformForStep(uint64_t seed, uint64_t counter) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ (counter * 0xd1b54a32d192ed03ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t n) {
  PositionLogprobs out;
  out.token = token;
  float max = kNegInf;
  for (float v : logits) {
    if (!std::isnan(v)) max = std::max(max, v);
  }
  double sum = 0;
  for (float v : logits) {
    if (!std::isnan(v)) sum += std::exp(static_cast<double>(v) - max);
  }
  const double log_z = max + std::log(sum);
  auto lp = [&](int32_t id) { return static_cast<float>(logits[id] - log_z); };
  out.logprob = lp(token);
  int32_t better = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > logits[token] || (logits[i] == logits[token] && static_cast<int32_t>(i) < token)) {
      ++better;
    }
  }
  out.rank = better + 1;
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    const size_t k = std::min<size_t>(n, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) out.top.push_back({ids[i], lp(ids[i])});
  }
  return out;
}

bool OnlyArgMax(const SamplingParams& p, bool bans_active) {
  return p.greedy() && !bans_active && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.logprobs < 0;
}

SampleResult Sample(std::span<const float> raw, const SamplingParams& p,
                    const SamplingContext& ctx) {
  std::vector<float> logits(raw.begin(), raw.end());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] += bias;
  }
  for (int32_t id : ctx.banned_tokens) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] = kNegInf;
  }
  ApplyPenalties(logits, p, ctx);

  SampleResult result;
  if (p.greedy()) {
    result.token = Argmax(logits);
  } else {
    // Candidates in descending logit order (ties: lower id), cut by min-p, top-k, then top-p.
    std::vector<int32_t> ids;
    ids.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!std::isnan(logits[i]) && logits[i] != kNegInf) ids.push_back(static_cast<int32_t>(i));
    }
    if (ids.empty()) {
      result.token = Argmax(logits);
    } else {
      auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      };
      // min-p keeps tokens with p >= min_p * p_max, i.e. logit >= max + T * ln(min_p): a cut
      // that needs no normalisation, applied before sorting to shrink the sort.
      float max_logit = kNegInf;
      for (int32_t id : ids) max_logit = std::max(max_logit, logits[id]);
      if (p.min_p > 0.0f) {
        const double cut = max_logit + p.temperature * std::log(static_cast<double>(p.min_p));
        std::erase_if(ids, [&](int32_t id) { return logits[id] < cut; });
      }
      size_t keep = ids.size();
      if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
        keep = static_cast<size_t>(p.top_k);
        std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
        ids.resize(keep);
      } else {
        std::sort(ids.begin(), ids.end(), by_logit);
      }
      const double inv_t = 1.0 / p.temperature;
      std::vector<double> probs(ids.size());
      double total = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        probs[i] = std::exp((logits[ids[i]] - max_logit) * inv_t);
        total += probs[i];
      }
      for (double& q : probs) q /= total;
      if (p.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p (at least one token)
        double cumulative = 0;
        size_t n = 0;
        while (n < probs.size() && (n == 0 || cumulative < p.top_p)) cumulative += probs[n++];
        probs.resize(n);
      }
      double mass = std::accumulate(probs.begin(), probs.end(), 0.0);
      const double u = UniformForStep(ctx.seed, ctx.output_tokens.size()) * mass;
      double cumulative = 0;
      result.token = ids[probs.size() - 1];
      for (size_t i = 0; i < probs.size(); ++i) {
        cumulative += probs[i];
        if (u < cumulative) {
          result.token = ids[i];
          break;
        }
      }
    }
  }
  if (p.logprobs >= 0) result.logprobs = ComputeLogprobs(raw, result.token, p.logprobs);
  return result;
}

}  // namespace xserv::sampling
