// Sampling kernels: one 512-thread CTA per row of f32 logits.
//
// Every cut of kernels/sampling.h (min-p, top-k, top-p, the draw itself) keeps a prefix of the
// candidates in the order "logit descending, id ascending". A prefix is held as a bound (v, j):
// x > v, or x == v and id <= j. The end of each prefix is found without sorting: bisection over the
// 32 bits of an order-preserving integer key of the logit finds v (each step is one pass over the
// row that sums weights, 1 for top-k, exp((x - max) / T) in double otherwise), then ties at v are
// resolved by id. About a hundred passes over a row that stays in L2; the greedy rows without
// processing never come here (CudaBackend::Sample takes the arg-max kernel instead).
//
// Sums run in double in a fixed order (thread-strided partials, warps in order), so a row's result
// does not depend on the batch, and the bisection's sums are monotone in the set they cover.
#include <cfloat>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sampling.h"

namespace xserv::kernels::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int32_t kModeDraw = 2;

struct Scratch {
  double sums[kWarps];
  float values[kWarps];
  int32_t ids[kWarps];
};

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// = kernels::UniformForStep.
__device__ __forceinline__ double Uniform(uint64_t seed, uint64_t counter) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ (counter * 0xd1b54a32d192ed03ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Monotone in the float order, with -0 and +0 one key (they compare equal).
__device__ __forceinline__ uint32_t Key(float x) {
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float FromKey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ double CtaSum(double v, Scratch& s) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  __syncthreads();  // earlier readers of the scratch are done
  if (threadIdx.x % kWarpSize == 0) s.sums[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  double total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += s.sums[w];
  return total;
}

// A candidate element; id < 0 is "none".
struct Cand {
  float v;
  int32_t id;
};

// a precedes b in the order (kLast: a follows b); "none" loses to everything.
template <bool kLast>
__device__ __forceinline__ bool Wins(const Cand& a, const Cand& b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  if (kLast) return a.v < b.v || (a.v == b.v && a.id > b.id);
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

// The first (kLast: last) candidate of the CTA in the order; every thread gets it. Candidates are
// distinct elements, so the winner is unique and every lane agrees.
template <bool kLast>
__device__ Cand CtaPick(Cand c, Scratch& s) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const Cand o{__shfl_xor_sync(kFullMask, c.v, offset),
                 __shfl_xor_sync(kFullMask, c.id, offset)};
    if (Wins<kLast>(o, c)) c = o;
  }
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) {
    s.values[threadIdx.x / kWarpSize] = c.v;
    s.ids[threadIdx.x / kWarpSize] = c.id;
  }
  __syncthreads();
  Cand best{0.0f, -1};
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const Cand o{s.values[w], s.ids[w]};
    if (Wins<kLast>(o, best)) best = o;
  }
  return best;
}

// The candidate set of a draw: finite-or-+inf logits at or above the min-p cut, within the prefix
// bound (v, j).
struct Bound {
  double cut = -INFINITY;
  float v = -INFINITY;
  int32_t j = INT_MAX;
  __device__ bool Holds(float x, int32_t id) const {
    return !isnan(x) && x != -INFINITY && static_cast<double>(x) >= cut &&
           (x > v || (x == v && id <= j));
  }
};

// Weight of a candidate: 1 (counting, for top-k) or its unnormalised probability.
struct Weight {
  bool mass = false;
  float max = 0.0f;
  double inv_t = 1.0;
  __device__ double operator()(float x) const {
    return mass ? exp(static_cast<double>(x - max) * inv_t) : 1.0;
  }
};

struct Row {
  const float* x;
  int32_t cols;
};

// Sum of weights over the set's elements that satisfy pred(x, id).
template <typename Pred>
__device__ double SumIf(const Row& row, const Bound& b, const Weight& w, Scratch& s, Pred pred) {
  double acc = 0;
  for (int32_t c = threadIdx.x; c < row.cols; c += kThreads) {
    const float x = row.x[c];
    if (b.Holds(x, c) && pred(x, c)) acc += w(x);
  }
  return CtaSum(acc, s);
}

__device__ __forceinline__ bool Meets(double sum, double target, bool strict) {
  return strict ? sum > target : sum >= target;
}

// The smallest id of the set's elements equal to v.
__device__ int32_t FirstAt(const Row& row, const Bound& b, float v, Scratch& s) {
  Cand c{0.0f, -1};
  for (int32_t i = threadIdx.x; i < row.cols; i += kThreads) {
    const float x = row.x[i];
    if (c.id < 0 && x == v && b.Holds(x, i)) c = Cand{x, i};
  }
  return CtaPick<false>(c, s).id;
}

// The first element e of the set in the order whose running weight (sum over the set up to and
// including e) meets target (> when strict, >= otherwise). Returns false when the whole set does
// not; otherwise *out is the prefix ending at e (its cut carried over), and e's id is out->j.
__device__ bool FindFirst(const Row& row, const Bound& b, const Weight& w, double target,
                          bool strict, Scratch& s, Bound* out) {
  const auto all = [](float, int32_t) { return true; };
  if (!Meets(SumIf(row, b, w, s, all), target, strict)) return false;
  // The largest key whose "at or above" weight meets the target is e's logit.
  uint32_t key = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t trial = key | (1u << bit);
    const double at_or_above =
        SumIf(row, b, w, s, [trial](float x, int32_t) { return Key(x) >= trial; });
    if (Meets(at_or_above, target, strict)) key = trial;
  }
  const float v = FromKey(key);
  // Ties at v: e is the one of smallest id whose prefix meets. The prefix sum is the same
  // predicate as above at id = cols - 1, so that end of the search is known to meet.
  int32_t lo = 0, hi = row.cols - 1;
  const double ties = SumIf(row, b, Weight{}, s, [v](float x, int32_t) { return x == v; });
  if (ties == 1.0) lo = hi = FirstAt(row, b, v, s);
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    const double prefix = SumIf(row, b, w, s, [v, mid](float x, int32_t id) {
      return x > v || (x == v && id <= mid);
    });
    if (Meets(prefix, target, strict)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  *out = Bound{b.cut, v, lo};
  return true;
}

// The first (kLast: last) element of the set in the order.
template <bool kLast>
__device__ Cand PickInSet(const Row& row, const Bound& b, Scratch& s) {
  Cand c{0.0f, -1};
  for (int32_t i = threadIdx.x; i < row.cols; i += kThreads) {
    const Cand o{row.x[i], i};
    if (b.Holds(o.v, i) && Wins<kLast>(o, c)) c = o;
  }
  return CtaPick<kLast>(c, s);
}

// The first non-NaN element after `prev` in the order (prev.id < 0: from the start).
__device__ Cand NextNonNaN(const Row& row, const Cand& prev, Scratch& s) {
  Cand c{0.0f, -1};
  for (int32_t i = threadIdx.x; i < row.cols; i += kThreads) {
    const Cand o{row.x[i], i};
    if (isnan(o.v) || (prev.id >= 0 && !Wins<false>(prev, o))) continue;
    if (Wins<false>(o, c)) c = o;
  }
  return CtaPick<false>(c, s);
}

__device__ int32_t Draw(const Row& row, const DeviceSampleRow& spec, Scratch& s) {
  Bound set;
  const Cand first = PickInSet<false>(row, set, s);
  if (spec.temperature == 0.0f || spec.top_k == 1 || first.id < 0) {
    const Cand best = NextNonNaN(row, Cand{0.0f, -1}, s);  // greedy, or nothing to draw from
    return best.id < 0 ? 0 : best.id;
  }
  const float max = first.v;
  if (spec.min_p > 0.0f) {
    set.cut = static_cast<double>(max) +
              static_cast<double>(spec.temperature) * log(static_cast<double>(spec.min_p));
  }
  const auto all = [](float, int32_t) { return true; };
  if (spec.top_k > 0) {
    const double count = SumIf(row, set, Weight{}, s, all);
    if (static_cast<double>(spec.top_k) < count) {
      FindFirst(row, set, Weight{}, static_cast<double>(spec.top_k), false, s, &set);
    }
  }
  const Weight mass{true, max, 1.0 / static_cast<double>(spec.temperature)};
  if (spec.top_p < 1.0f) {
    const double total = SumIf(row, set, mass, s, all);
    FindFirst(row, set, mass, static_cast<double>(spec.top_p) * total, false, s, &set);
  }
  const double kept = SumIf(row, set, mass, s, all);
  const double u = Uniform(spec.seed, spec.counter) * kept;
  Bound drawn;
  if (FindFirst(row, set, mass, u, true, s, &drawn)) return drawn.j;
  return PickInSet<true>(row, set, s).id;  // rounding left u past the end: the last candidate
}

__device__ void Logprobs(const Row& row, int32_t token, int32_t n, Scratch& s,
                         DeviceSampleResult* out) {
  float max = -INFINITY;
  for (int32_t i = threadIdx.x; i < row.cols; i += kThreads) max = fmaxf(max, row.x[i]);
  max = CtaPick<false>(Cand{max, static_cast<int32_t>(threadIdx.x)}, s).v;
  double sum = 0;
  for (int32_t i = threadIdx.x; i < row.cols; i += kThreads) {
    const float x = row.x[i];
    if (!isnan(x)) sum += exp(static_cast<double>(x) - max);
  }
  const double log_z = static_cast<double>(max) + log(CtaSum(sum, s));
  const float xt = row.x[token];
  double better = 0;
  for (int32_t i = threadIdx.x; i < row.cols; i += kThreads) {
    const float x = row.x[i];
    if (x > xt || (x == xt && i < token)) better += 1.0;
  }
  better = CtaSum(better, s);
  Cand prev{0.0f, -1};
  int32_t num_top = 0;
  for (; num_top < n; ++num_top) {
    prev = NextNonNaN(row, prev, s);
    if (prev.id < 0) break;
    if (threadIdx.x == 0) {
      out->top_ids[num_top] = prev.id;
      out->top_logprobs[num_top] = static_cast<float>(static_cast<double>(prev.v) - log_z);
    }
  }
  if (threadIdx.x == 0) {
    out->logprob = static_cast<float>(static_cast<double>(xt) - log_z);
    out->rank = static_cast<int32_t>(better) + 1;
    out->num_top = num_top;
  }
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(const RowsView logits, const DeviceSampleRow* rows,
                 const DeviceAdjustment* adjustments, float* saved, DeviceSampleResult* results) {
  __shared__ Scratch s;
  const int64_t r = blockIdx.x;
  const DeviceSampleRow spec = rows[r];
  DeviceSampleResult* out = results + r;
  if (spec.mode == 0) return;  // uniform across the CTA
  float* x = RowPtr<float>(logits, r);
  const Row row{x, static_cast<int32_t>(logits.cols)};
  int32_t token = spec.target;
  if (spec.mode == kModeDraw) {
    const DeviceAdjustment* adjust = adjustments + spec.adjustments_begin;
    float* raw = saved + spec.adjustments_begin;
    for (int32_t k = threadIdx.x; k < spec.adjustments_count; k += kThreads) {
      const DeviceAdjustment a = adjust[k];
      float v = x[a.token];
      raw[k] = v;
      v += a.bias;
      if (a.flags & kAdjustBanned) v = -INFINITY;
      if ((a.flags & kAdjustSeen) && spec.repetition_penalty != 1.0f) {
        v = v > 0 ? v / spec.repetition_penalty : v * spec.repetition_penalty;
      }
      if (a.output_count > 0) {
        v -= spec.presence_penalty + spec.frequency_penalty * static_cast<float>(a.output_count);
      }
      x[a.token] = v;
    }
    __syncthreads();
    token = Draw(row, spec, s);
    __syncthreads();  // every read of the adjusted row is done
    for (int32_t k = threadIdx.x; k < spec.adjustments_count; k += kThreads) {
      x[adjust[k].token] = raw[k];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out->token = token;
    out->num_top = 0;
  }
  if (spec.num_logprobs >= 0) Logprobs(row, token, spec.num_logprobs, s, out);
}

}  // namespace

cudaError_t LaunchSample(const RowsView& logits, const DeviceSampleRow* rows,
                         const DeviceAdjustment* adjustments, float* saved,
                         DeviceSampleResult* results, cudaStream_t stream) {
  if (logits.rows == 0) return cudaSuccess;
  SampleKernel<<<static_cast<unsigned>(logits.rows), kThreads, 0, stream>>>(
      logits, rows, adjustments, saved, results);
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
