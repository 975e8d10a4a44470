#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace xserv::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// NaN-safe arg-max: NaNs never win; ties go to the lowest id; an all-NaN row gives 0.
int32_t Argmax(std::span<const float> v) {
  int32_t best = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) continue;
    if (best < 0 || v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best < 0 ? 0 : best;
}

void Adjust(std::vector<float>& x, const SampleRowSpec& s) {
  const auto vocab = static_cast<int64_t>(x.size());
  for (const TokenAdjustment& a : s.adjustments) {
    if (a.token < 0 || a.token >= vocab) continue;
    float& v = x[a.token];
    v += a.bias;
    if (a.banned) v = kNegInf;
    if (a.seen && s.repetition_penalty != 1.0f) {
      v = v > 0 ? v / s.repetition_penalty : v * s.repetition_penalty;
    }
    if (a.output_count > 0) {
      v -= s.presence_penalty + s.frequency_penalty * static_cast<float>(a.output_count);
    }
  }
}

// The draw of a non-greedy row over adjusted logits `x`.
int32_t Draw(const std::vector<float>& x, const SampleRowSpec& s) {
  std::vector<int32_t> ids;
  ids.reserve(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isnan(x[i]) && x[i] != kNegInf) ids.push_back(static_cast<int32_t>(i));
  }
  if (ids.empty()) return Argmax(x);
  auto in_order = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  float max_logit = kNegInf;
  for (int32_t id : ids) max_logit = std::max(max_logit, x[id]);
  // min-p keeps p >= min_p * p_max, i.e. logit >= max + T * ln(min_p): no normalisation needed.
  if (s.min_p > 0.0f) {
    const double cut = max_logit + s.temperature * std::log(static_cast<double>(s.min_p));
    std::erase_if(ids, [&](int32_t id) { return x[id] < cut; });
  }
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < ids.size()) {
    const auto keep = static_cast<size_t>(s.top_k);
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), in_order);
    ids.resize(keep);
  } else {
    std::sort(ids.begin(), ids.end(), in_order);
  }
  const double inv_t = 1.0 / s.temperature;
  std::vector<double> probs(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    probs[i] = std::exp(static_cast<double>(x[ids[i]] - max_logit) * inv_t);
    total += probs[i];
  }
  // top-p: the shortest prefix whose mass reaches top_p of the total (at least one token).
  size_t n = probs.size();
  if (s.top_p < 1.0f) {
    const double target = static_cast<double>(s.top_p) * total;
    double cumulative = 0;
    n = 0;
    while (n < probs.size() && (n == 0 || cumulative < target)) cumulative += probs[n++];
  }
  const double mass = std::accumulate(probs.begin(), probs.begin() + n, 0.0);
  const double u = UniformForStep(s.seed, s.counter) * mass;
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += probs[i];
    if (u < cumulative) return ids[i];
  }
  return ids[n - 1];
}

// Logprob, rank and top-n of `token` under the raw distribution.
void FillLogprobs(std::span<const float> logits, int32_t n, SampleRowResult& out) {
  const int32_t token = out.token;
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
    const auto id = static_cast<int32_t>(i);
    if (logits[i] > logits[token] || (logits[i] == logits[token] && id < token)) ++better;
  }
  out.rank = better + 1;
  std::vector<int32_t> ids;
  ids.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) ids.push_back(static_cast<int32_t>(i));
  }
  const size_t k = std::min<size_t>(static_cast<size_t>(std::min(n, kMaxSampleLogprobs)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.num_top = static_cast<int32_t>(k);
  for (size_t i = 0; i < k; ++i) {
    out.top_ids[i] = ids[i];
    out.top_logprobs[i] = lp(ids[i]);
  }
}

}  // namespace

double UniformForStep(uint64_t seed, uint64_t counter) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ (counter * 0xd1b54a32d192ed03ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

SampleRowResult SampleRowReference(std::span<const float> logits, const SampleRowSpec& spec) {
  SampleRowResult out;
  if (spec.mode == SampleMode::kSkip || logits.empty()) return out;
  if (spec.mode == SampleMode::kScore) {
    out.token = spec.target;
  } else {
    std::vector<float> x(logits.begin(), logits.end());
    Adjust(x, spec);
    out.token = spec.greedy() ? Argmax(x) : Draw(x, spec);
  }
  if (spec.num_logprobs >= 0) FillLogprobs(logits, spec.num_logprobs, out);
  return out;
}

}  // namespace xserv::kernels
