// RouterTopK and Experts (gpt-oss MoE) against per-token double references.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

// ---- RouterTopK -------------------------------------------------------------------------------

TEST_P(MoeOpTest, RouterTopKMatchesReference) {
  std::mt19937 rng(61);
  for (int64_t experts : {4, 8, 32, 128}) {
    for (int64_t k : std::initializer_list<int64_t>{1, 2, 4, experts}) {
      if (k > experts) continue;
      for (bool ties : {false, true}) {
        SCOPED_TRACE(::testing::Message() << experts << " experts, top " << k << " ties " << ties);
        const int64_t tokens = 9;
        std::vector<float> logits = RandomFloats(tokens * experts, rng, -4.0f, 4.0f);
        // Quantised logits tie often: ties must go to the lower expert id.
        if (ties) {
          for (float& l : logits) l = std::round(l);
        }
        Tensor ids = UploadI32(std::vector<int32_t>(tokens * k, -1), {tokens, k});
        Tensor weights = Poisoned({tokens, k}, /*f32=*/true);
        ASSERT_TRUE(backend().RouterTopK(UploadF32(logits, {tokens, experts}), ids, weights).ok());
        const std::vector<int32_t> got_ids = DownloadI32(ids);
        std::vector<int32_t> want_ids;
        std::vector<double> want_weights;
        for (int64_t t = 0; t < tokens; ++t) {
          const float* l = &logits[t * experts];
          std::vector<int32_t> order(experts);
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
          // Softmax over the k selected logits only.
          double sum = 0;
          for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(l[order[j]]) - l[order[0]]);
          for (int64_t j = 0; j < k; ++j) {
            want_ids.push_back(order[j]);
            want_weights.push_back(std::exp(static_cast<double>(l[order[j]]) - l[order[0]]) / sum);
          }
        }
        EXPECT_EQ(got_ids, want_ids);
        // exp and a division in double, one rounding to f32.
        EXPECT_TRUE(AllClose(Download(weights), want_weights, 1e-6));
      }
    }
  }
}

TEST_P(MoeOpTest, RouterTopKRejectsBadK) {
  std::vector<float> logits(2 * 4, 0.0f);
  Tensor tl = UploadF32(logits, {2, 4});
  for (int64_t k : {0, 5}) {
    EXPECT_FALSE(backend()
                     .RouterTopK(tl, UploadI32(std::vector<int32_t>(2 * k, 0), {2, k}),
                                 Poisoned({2, k}, true))
                     .ok())
        << k;
  }
}

// ---- Experts ----------------------------------------------------------------------------------

struct ExpertsShape {
  int64_t num_experts, hidden, inter;
};

// Per-token reference: run each selected expert on its own, in double.
struct ExpertsRef {
  std::vector<double> out, magnitude;
  int clamped_gate = 0, clamped_up = 0;
};

ExpertsRef ReferenceExperts(const ExpertsShape& s, const std::vector<float>& x,
                            const std::vector<int32_t>& ids, const std::vector<float>& weights,
                            int64_t k, const std::vector<float>& gu, const std::vector<float>& gub,
                            const std::vector<float>& dn, const std::vector<float>& dnb,
                            const GluParams& glu) {
  const int64_t tokens = static_cast<int64_t>(x.size()) / s.hidden, h = s.hidden, in = s.inter;
  ExpertsRef ref;
  ref.out.assign(tokens * h, 0.0);
  ref.magnitude.assign(tokens * h, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[t * k + j];
      std::vector<double> act(in), act_mag(in);
      for (int64_t i = 0; i < in; ++i) {
        // gate_up rows interleave: 2i is gate_i, 2i + 1 is up_i.
        double gate = gub[e * 2 * in + 2 * i], up = gub[e * 2 * in + 2 * i + 1];
        double gate_mag = std::abs(gate), up_mag = std::abs(up);
        for (int64_t c = 0; c < h; ++c) {
          const double xv = x[t * h + c];
          gate += gu[(e * 2 * in + 2 * i) * h + c] * xv;
          up += gu[(e * 2 * in + 2 * i + 1) * h + c] * xv;
          gate_mag += std::abs(gu[(e * 2 * in + 2 * i) * h + c] * xv);
          up_mag += std::abs(gu[(e * 2 * in + 2 * i + 1) * h + c] * xv);
        }
        ref.clamped_gate += gate > glu.limit;
        ref.clamped_up += std::abs(up) > glu.limit;
        gate = std::min(gate, static_cast<double>(glu.limit));
        up = std::clamp(up, -static_cast<double>(glu.limit), static_cast<double>(glu.limit));
        const double glu_v = gate / (1.0 + std::exp(-glu.alpha * gate));
        act[i] = (up + 1.0) * glu_v;
        // Error model: the GLU's slope is at most ~(limit + 1) * 1.1 in gate and limit in up, so
        // an f32 error in gate/up (relative to their magnitudes) moves act by that much.
        act_mag[i] = std::abs(act[i]) + (glu.limit + 1) * 1.2 * gate_mag + glu.limit * up_mag;
      }
      for (int64_t c = 0; c < h; ++c) {
        double y = dnb[e * h + c], y_mag = std::abs(dnb[e * h + c]);
        for (int64_t i = 0; i < in; ++i) {
          y += dn[(e * h + c) * in + i] * act[i];
          y_mag += std::abs(dn[(e * h + c) * in + i]) * act_mag[i];
        }
        ref.out[t * h + c] += weights[t * k + j] * y;
        ref.magnitude[t * h + c] += std::abs(weights[t * k + j]) * y_mag;
      }
    }
  }
  return ref;
}

TEST_P(MoeOpTest, ExpertsMatchPerTokenReference) {
  std::mt19937 rng(62);
  const GluParams glu{.limit = 7.0f, .alpha = 1.702f};
  for (const ExpertsShape& s : {ExpertsShape{8, 16, 8}, ExpertsShape{6, 48, 20},
                                ExpertsShape{32, 64, 32}}) {
    for (int64_t k : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << s.num_experts << " experts, hidden " << s.hidden
                                        << ", inter " << s.inter << ", top " << k);
      const int64_t tokens = 11, e = s.num_experts, h = s.hidden, in = s.inter;
      // Routing: distinct experts per token, drawn from the first e - 2 experts so the last two
      // are never picked; token 1 reuses token 0's set in another order.
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int32_t> pool(e - 2);
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        ids.insert(ids.end(), pool.begin(), pool.begin() + k);
      }
      std::reverse_copy(ids.begin(), ids.begin() + k, ids.begin() + k);
      std::vector<float> weights = RandomFloats(tokens * k, rng, 0.05f, 1.0f);
      // Weights scaled so that gate and up often leave [-limit, limit] and the clamps matter.
      const float w_range = 16.0f / std::sqrt(static_cast<float>(h));
      std::vector<float> x = RandomFloats(tokens * h, rng);
      std::vector<float> gu = RandomFloats(e * 2 * in * h, rng, -w_range, w_range);
      std::vector<float> gub = RandomFloats(e * 2 * in, rng, -2.0f, 2.0f);
      std::vector<float> dn = RandomFloats(e * h * in, rng, -0.3f, 0.3f);
      std::vector<float> dnb = RandomFloats(e * h, rng);
      ExpertWeights experts;
      experts.format = ExpertWeights::Format::kDense;
      experts.gate_up = Upload(gu, {e, 2 * in, h});
      experts.gate_up_bias = Upload(gub, {e, 2 * in});
      experts.down = Upload(dn, {e, h, in});
      experts.down_bias = Upload(dnb, {e, h});
      Tensor tx = Upload(x, {tokens, h});
      Tensor out = Poisoned({tokens, h});
      ASSERT_TRUE(backend()
                      .Experts(tx, UploadI32(ids, {tokens, k}), UploadF32(weights, {tokens, k}),
                               experts, glu, out)
                      .ok());
      const ExpertsRef ref = ReferenceExperts(s, x, ids, weights, k, gu, gub, dn, dnb, glu);
      EXPECT_GT(ref.clamped_gate, 0);
      EXPECT_GT(ref.clamped_up, 0);
      // f32 bound 1e-5 relative to the magnitude model above: two f32 GEMMs (~sqrt(K) ulp) and
      // a few f32 roundings in the GLU.
      EXPECT_TRUE(AllWithin(Download(out), ref.out, ref.magnitude, Tol({.f32 = 1e-5, .bf16 = 2e-2})));
    }
  }
}

// Batch invariance of the expert layer: a token's output must not depend on the other tokens of
// the batch (how many share its experts), or batching could change greedy tokens of MoE models.
TEST_P(MoeOpTest, ExpertsBatchInvariance) {
  std::mt19937 rng(63);
  // Sizes where one token alone and a dozen tokens per expert take different OpenBLAS paths.
  const int64_t tokens = 24, e = 4, h = 256, in = 256, k = 2;
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t first = static_cast<int32_t>(rng() % e);
    ids.push_back(first);
    ids.push_back(static_cast<int32_t>((first + 1 + rng() % (e - 1)) % e));
  }
  std::vector<float> weights = RandomFloats(tokens * k, rng, 0.05f, 1.0f);
  std::vector<float> x = RandomFloats(tokens * h, rng);
  std::vector<float> gu = RandomFloats(e * 2 * in * h, rng, -0.5f, 0.5f);
  std::vector<float> gub = RandomFloats(e * 2 * in, rng), dnb = RandomFloats(e * h, rng);
  std::vector<float> dn = RandomFloats(e * h * in, rng, -0.3f, 0.3f);
  ExpertWeights experts;
  experts.gate_up = Upload(gu, {e, 2 * in, h});
  experts.gate_up_bias = Upload(gub, {e, 2 * in});
  experts.down = Upload(dn, {e, h, in});
  experts.down_bias = Upload(dnb, {e, h});
  Tensor tx = Upload(x, {tokens, h}), tids = UploadI32(ids, {tokens, k});
  Tensor tw = UploadF32(weights, {tokens, k});
  Tensor full = Poisoned({tokens, h});
  ASSERT_TRUE(backend().Experts(tx, tids, tw, experts, {}, full).ok());
  const std::vector<float> ref = Download(full);
  int differing = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    Tensor one = Poisoned({1, h});
    ASSERT_TRUE(backend()
                    .Experts(tx.SliceRows(t, t + 1), tids.SliceRows(t, t + 1),
                             tw.SliceRows(t, t + 1), experts, {}, one)
                    .ok());
    differing += !BitIdentical(Download(one), std::span(ref).subspan(t * h, h));
  }
  EXPECT_EQ(differing, 0) << differing << " of " << tokens
                          << " tokens computed alone differ from the same tokens in one batch";
}

TEST_P(MoeOpTest, ExpertsRejectMxfp4AndBadIds) {
  std::vector<float> x(2 * 8, 1.0f), gu(3 * 8 * 8, 0.1f), gub(3 * 8, 0.0f), dn(3 * 8 * 4, 0.1f),
      dnb(3 * 8, 0.0f);
  ExpertWeights experts;
  experts.gate_up = Upload(gu, {3, 8, 8});
  experts.gate_up_bias = Upload(gub, {3, 8});
  experts.down = Upload(dn, {3, 8, 4});
  experts.down_bias = Upload(dnb, {3, 8});
  Tensor tx = Upload(x, {2, 8});
  Tensor weights = UploadF32({0.5f, 0.5f}, {2, 1});
  ASSERT_TRUE(backend().Experts(tx, UploadI32({0, 2}, {2, 1}), weights, experts, {},
                                Poisoned({2, 8})).ok());
  for (int32_t bad : {-1, 3}) {
    const absl::Status status =
        backend().Experts(tx, UploadI32({0, bad}, {2, 1}), weights, experts, {}, Poisoned({2, 8}));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
  }
  // The CPU backend takes dense experts only (MXFP4 is dequantised at load).
  if (backend().device() == DeviceType::kCpu) {
    ExpertWeights mxfp4 = experts;
    mxfp4.format = ExpertWeights::Format::kMxfp4;
    const absl::Status status =
        backend().Experts(tx, UploadI32({0, 1}, {2, 1}), weights, mxfp4, {}, Poisoned({2, 8}));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

}  // namespace
}  // namespace xserv::kernels::testing
