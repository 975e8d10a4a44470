// The CUDA backend's mixture-of-experts ops against the CPU backend: router top-k, the dense
// experts, the quantised experts (MXFP4 and FP8, moe_quantized.cu) over the same weights decoded
// on the host, and the experts' combine fused into the next norm. Tolerances: see
// cuda_test_util.h. Skipped without a device.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "kernels/cuda/moe_quantized.h"
#include "tests/gpu/cuda_test_util.h"

namespace xserv::kernels::cuda::testing {
namespace {

class CudaMoe : public CudaVsCpuTest {};

TEST_F(CudaMoe, RouterTopKAndExperts) {
  std::mt19937 rng(13);
  struct Case {
    int64_t tokens, experts, k, hidden, inter;
  };
  for (const Case c : {Case{5, 4, 2, 64, 96}, Case{33, 32, 4, 128, 64}, Case{3, 8, 8, 96, 160}}) {
    std::vector<float> logit_values(c.tokens * c.experts);
    // Distinct values (a permutation) so the selected ids are unambiguous.
    for (int64_t t = 0; t < c.tokens; ++t) {
      std::vector<int> perm(c.experts);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t e = 0; e < c.experts; ++e) logit_values[t * c.experts + e] = perm[e] * 0.37f;
    }
    const Twin logits = Upload(logit_values, {c.tokens, c.experts}, DType::kF32);
    const Twin ids{Keep(cpu().Allocate(DType::kI32, {c.tokens, c.k})),
                   Keep(cuda().Allocate(DType::kI32, {c.tokens, c.k}))};
    const Twin weights = Poisoned({c.tokens, c.k}, DType::kF32);
    ASSERT_TRUE(cpu().RouterTopK(logits.cpu, ids.cpu, weights.cpu).ok());
    ASSERT_TRUE(cuda().RouterTopK(logits.cuda, ids.cuda, weights.cuda).ok());
    std::vector<int32_t> ids_cpu(c.tokens * c.k), ids_cuda(c.tokens * c.k);
    ASSERT_TRUE(cpu().CopyToHost(ids.cpu, ids_cpu.data()).ok());
    ASSERT_TRUE(cuda().CopyToHost(ids.cuda, ids_cuda.data()).ok());
    EXPECT_EQ(ids_cuda, ids_cpu);
    EXPECT_LE(Error(weights), kF32OpTol);

    const int64_t e = c.experts, h = c.hidden, i = c.inter;
    const Twin x = Upload(RandomBf16(c.tokens * h, rng), {c.tokens, h});
    const Twin gu = Upload(RandomBf16(e * 2 * i * h, rng, -0.3f, 0.3f), {e, 2 * i, h});
    const Twin gub = Upload(RandomBf16(e * 2 * i, rng), {e, 2 * i});
    const Twin dn = Upload(RandomBf16(e * h * i, rng, -0.3f, 0.3f), {e, h, i});
    const Twin dnb = Upload(RandomBf16(e * h, rng), {e, h});
    const Twin out = Poisoned({c.tokens, h});
    auto weights_of = [](const Twin& g, const Twin& gb, const Twin& d, const Twin& db, bool dev) {
      ExpertWeights w;
      w.gate_up = dev ? g.cuda : g.cpu;
      w.gate_up_bias = dev ? gb.cuda : gb.cpu;
      w.down = dev ? d.cuda : d.cpu;
      w.down_bias = dev ? db.cuda : db.cpu;
      return w;
    };
    // A small limit makes the clamps bite.
    const GluParams glu{.limit = 1.5f, .alpha = 1.702f};
    ASSERT_TRUE(cpu().Experts(x.cpu, ids.cpu, weights.cpu, weights_of(gu, gub, dn, dnb, false),
                              glu, out.cpu)
                    .ok());
    ASSERT_TRUE(cuda().Experts(x.cuda, ids.cuda, weights.cuda, weights_of(gu, gub, dn, dnb, true),
                               glu, out.cuda)
                    .ok());
    EXPECT_LE(Error(out), kBf16OutTol) << c.tokens << " tokens, " << c.experts << " experts";
  }
}

// MXFP4 and FP8 experts (moe_quantized.cu) against the CPU's dense experts over the same weights
// decoded on the host (kernels/mxfp4.h, kernels/fp8.h; FP8 with bf16 block scales, whose products
// the device rounds to bf16 as a dense copy would, and blocks cut by N and K: 2880 = 22.5 blocks):
// odd group counts (inter 96 = 3 groups), output tiles cut by N, many
// tokens per expert, and more than one 1024-token round; on the default backend (the GEMV form up
// to kMoeGemvMaxTokens tokens, the tensor-core GEMM above) and a batch-invariant one (always the
// GEMM). Every token of a batch equals the same token computed alone, bit for bit, when both take
// the same kernel (its slot in an expert's block or its pair's CTA does not matter); across the
// two kernels within bf16 tolerance.
TEST_F(CudaMoe, QuantizedExpertsMatchDenseOnTheCpu) {
  auto invariant = CudaBackend::Create(
      CudaBackendOptions{.device = 0, .check_each_op = true, .batch_invariant = true});
  ASSERT_TRUE(invariant.ok()) << invariant.status();
  std::mt19937 rng(14);
  struct Case {
    int64_t tokens, experts, k, hidden, inter;
    int min_scale = 120;  // MXFP4: E8M0 scales min_scale .. min_scale + 4
  };
  for (const ExpertWeights::Format format :
       {ExpertWeights::Format::kMxfp4, ExpertWeights::Format::kFp8}) {
    const bool fp8 = format == ExpertWeights::Format::kFp8;
    SCOPED_TRACE(fp8 ? "FP8" : "MXFP4");
    // From the fifth on gpt-oss-20b's sizes (and its TP=2 down projection: 45 groups); one
    // token of them (the GEMV on the default backend) against the CPU, and a hidden size of 144
    // groups (the GEMV's warps loop over more than one round of chunks); 8 tokens sharing 4
    // experts; MXFP4 scales 2^-1 .. 2^3, across the GEMV's one- and two-multiply dequantisation
    // (s <= 128 or not; the GEMM's too, at 4 and 64 tokens); two tokens (the GEMV's last
    // size); 150 pairs per expert over 3 chunks of K with a partial last one (the GEMM's every
    // m16 tile and its A double buffer; its last block ends mid-tile); 32-row blocks
    // (MoeBlockRowsFor) at 24 and 32 pairs per expert on average, the latter exactly at the
    // switch and with some experts over 32 pairs (two blocks); 40 pairs for each of 4 experts
    // (64-row blocks in the batch, 32-row ones for a token alone: the bit-for-bit check below
    // spans both sizes).
    for (const Case c : {Case{1, 4, 2, 64, 96}, Case{5, 8, 4, 96, 64}, Case{37, 32, 4, 128, 96},
                         Case{1100, 8, 2, 64, 64}, Case{5, 4, 2, 2880, 2880},
                         Case{3, 4, 2, 2880, 1440}, Case{1, 4, 2, 2880, 2880},
                         Case{1, 4, 2, 4608, 96}, Case{8, 4, 4, 2880, 2880},
                         Case{1, 4, 2, 2880, 1440, 126}, Case{4, 4, 2, 96, 64, 126},
                         Case{2, 4, 2, 2880, 1440}, Case{300, 4, 2, 288, 160},
                         Case{64, 8, 2, 288, 160, 126}, Case{48, 8, 4, 288, 160},
                         Case{64, 8, 4, 288, 160}, Case{40, 4, 4, 288, 160}}) {
      SCOPED_TRACE(::testing::Message() << c.tokens << " tokens, " << c.experts << " experts, top-"
                                        << c.k << ", hidden " << c.hidden << ", inter " << c.inter);
      if (fp8 && c.min_scale != Case{}.min_scale) continue;  // an MXFP4-only variation
      const int64_t e = c.experts, h = c.hidden, i = c.inter;
      // Random codes; the default scales 2^-7 .. 2^-3 keep the products in the GLU's interesting
      // range.
      auto random_mxfp4 = [&](int64_t rows, int64_t in, std::vector<uint8_t>& blocks,
                              std::vector<uint8_t>& scales, std::vector<float>& dense) {
        blocks.resize(e * rows * in / 2);
        scales.resize(e * rows * in / 32);
        for (auto& b : blocks) b = static_cast<uint8_t>(rng() & 0xFF);
        for (auto& s : scales) s = static_cast<uint8_t>(c.min_scale + rng() % 5);
        dense.resize(e * rows * in);
        ASSERT_TRUE(DequantizeMxfp4(blocks, scales, e * rows, in / 32, dense).ok());
      };
      // Random E4M3 codes (no NaN) with bf16 block scales making weights up to about +-1.3.
      constexpr int64_t kB = kFp8ExpertBlock;
      auto random_fp8 = [&](int64_t rows, int64_t in, std::vector<uint8_t>& codes,
                            std::vector<float>& scales, std::vector<float>& dense) {
        const int64_t rb = (rows + kB - 1) / kB, cb = (in + kB - 1) / kB;
        codes.resize(e * rows * in);
        for (auto& b : codes) {
          do b = static_cast<uint8_t>(rng() & 0xFF);
          while ((b & 0x7F) == 0x7F);
        }
        scales.resize(e * rb * cb);
        for (float& sc : scales) sc = RoundBf16((0.3f + (rng() % 100) / 100.0f) / 448.0f);
        dense.resize(e * rows * in);
        for (int64_t x = 0; x < e; ++x) {
          Fp8Blocks q;
          q.codes.assign(codes.begin() + x * rows * in, codes.begin() + (x + 1) * rows * in);
          q.scale_inv.assign(scales.begin() + x * rb * cb, scales.begin() + (x + 1) * rb * cb);
          DequantizeFp8Blocks(q, rows, in, kB,
                              std::span<float>(dense).subspan(x * rows * in, rows * in));
        }
      };
      auto upload_u8 = [&](const std::vector<uint8_t>& bytes, std::vector<int64_t> shape) {
        const Tensor t = Keep(cuda().Allocate(DType::kU8, shape));
        EXPECT_TRUE(cuda().CopyFromHost(bytes.data(), t).ok());
        return t;
      };
      std::vector<float> gu_dense, dn_dense;
      ExpertWeights mx;
      mx.format = format;
      if (fp8) {
        std::vector<uint8_t> gu_codes, dn_codes;
        std::vector<float> gu_scales, dn_scales;
        random_fp8(2 * i, h, gu_codes, gu_scales, gu_dense);
        random_fp8(h, i, dn_codes, dn_scales, dn_dense);
        mx.gate_up_blocks = upload_u8(gu_codes, {e, 2 * i, h});
        mx.gate_up_scales = Upload(gu_scales, {e, (2 * i + kB - 1) / kB, (h + kB - 1) / kB},
                                   DType::kF32).cuda;
        mx.down_blocks = upload_u8(dn_codes, {e, h, i});
        mx.down_scales =
            Upload(dn_scales, {e, (h + kB - 1) / kB, (i + kB - 1) / kB}, DType::kF32).cuda;
      } else {
        std::vector<uint8_t> gu_blocks, gu_scales, dn_blocks, dn_scales;
        random_mxfp4(2 * i, h, gu_blocks, gu_scales, gu_dense);
        random_mxfp4(h, i, dn_blocks, dn_scales, dn_dense);
        mx.gate_up_blocks = upload_u8(gu_blocks, {e, 2 * i, h / 32, 16});
        mx.gate_up_scales = upload_u8(gu_scales, {e, 2 * i, h / 32});
        mx.down_blocks = upload_u8(dn_blocks, {e, h, i / 32, 16});
        mx.down_scales = upload_u8(dn_scales, {e, h, i / 32});
      }
      const Twin gub = Upload(RandomBf16(e * 2 * i, rng), {e, 2 * i});
      const Twin dnb = Upload(RandomBf16(e * h, rng), {e, h});
      ExpertWeights dense;
      dense.gate_up = Keep(cpu().Allocate(DType::kF32, {e, 2 * i, h}));
      dense.down = Keep(cpu().Allocate(DType::kF32, {e, h, i}));
      ASSERT_TRUE(cpu().CopyFromHost(gu_dense.data(), dense.gate_up).ok());
      ASSERT_TRUE(cpu().CopyFromHost(dn_dense.data(), dense.down).ok());
      dense.gate_up_bias = gub.cpu;
      dense.down_bias = dnb.cpu;
      mx.gate_up_bias = gub.cuda;
      mx.down_bias = dnb.cuda;

      std::vector<int32_t> id_values(c.tokens * c.k);
      std::vector<float> weight_values(c.tokens * c.k);
      for (int64_t t = 0; t < c.tokens; ++t) {
        std::vector<int32_t> perm(e);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t j = 0; j < c.k; ++j) {
          id_values[t * c.k + j] = perm[j];
          weight_values[t * c.k + j] = RoundBf16(0.1f + 0.8f * (rng() % 1000) / 1000.0f);
        }
      }
      const Twin ids = UploadI32(id_values, {c.tokens, c.k});
      const Twin weights = Upload(weight_values, {c.tokens, c.k}, DType::kF32);
      const Twin x = Upload(RandomBf16(c.tokens * h, rng), {c.tokens, h});
      const Twin out = Poisoned({c.tokens, h});
      const std::vector<float> poison(c.tokens * h, NAN);
      const GluParams glu{.limit = 1.5f, .alpha = 1.702f};
      ASSERT_TRUE(cpu().Experts(x.cpu, ids.cpu, weights.cpu, dense, glu, out.cpu).ok());
      ASSERT_TRUE(cuda().Synchronize().ok());  // uploads done before the other backend's stream
      for (CudaBackend* b : {&cuda(), invariant->get()}) {
        const bool gemm_always = b != &cuda();
        SCOPED_TRACE(gemm_always ? "batch-invariant backend" : "default backend");
        UploadCuda(poison, out.cuda);  // each backend must write every output itself
        ASSERT_TRUE(cuda().Synchronize().ok());
        const absl::Status run = b->Experts(x.cuda, ids.cuda, weights.cuda, mx, glu, out.cuda);
        ASSERT_TRUE(run.ok()) << run;
        ASSERT_TRUE(b->Synchronize().ok());
        // The device rounds the activations to bf16 before the down projection (the CPU keeps f32).
        EXPECT_LE(Error(out), 2 * kBf16OutTol);
        if (c.tokens > 64) continue;
        const std::vector<float> batch = DownloadCuda(out.cuda);
        const bool same_kernel = gemm_always || c.tokens <= kMoeGemvMaxTokens;
        int differing = 0;
        for (int64_t t = 0; t < c.tokens; ++t) {
          const Tensor one = Keep(cuda().Allocate(DType::kBF16, {1, h}));
          UploadCuda(std::vector<float>(h, NAN), one);
          ASSERT_TRUE(cuda().Synchronize().ok());
          ASSERT_TRUE(b->Experts(x.cuda.SliceRows(t, t + 1), ids.cuda.SliceRows(t, t + 1),
                                 weights.cuda.SliceRows(t, t + 1), mx, glu, one)
                          .ok());
          ASSERT_TRUE(b->Synchronize().ok());
          const std::vector<float> alone = DownloadCuda(one);
          const std::vector<float> in_batch(batch.begin() + t * h, batch.begin() + (t + 1) * h);
          if (same_kernel) {
            differing += alone != in_batch;
          } else {
            EXPECT_LE(RelativeError(alone, in_batch), 2 * kBf16OutTol) << "token " << t;
          }
        }
        EXPECT_EQ(differing, 0) << "tokens computed alone differ from the batch";
      }
    }
  }
}

// Random MXFP4 experts on the device (codes uniform, E8M0 scales 2^-7 .. 2^-3) and routings for
// the fused-kernel tests below.
class Mxfp4Experts : public CudaMoe {
 protected:
  ExpertWeights RandomExperts(int64_t e, int64_t h, int64_t i, std::mt19937& rng) {
    auto upload_u8 = [&](int64_t n, std::vector<int64_t> shape, uint8_t lo, int spread) {
      std::vector<uint8_t> bytes(n);
      for (auto& b : bytes) b = static_cast<uint8_t>(lo + rng() % spread);
      const Tensor t = Keep(cuda().Allocate(DType::kU8, shape));
      EXPECT_TRUE(cuda().CopyFromHost(bytes.data(), t).ok());
      return t;
    };
    ExpertWeights mx;
    mx.format = ExpertWeights::Format::kMxfp4;
    mx.gate_up_blocks = upload_u8(e * 2 * i * h / 2, {e, 2 * i, h / 32, 16}, 0, 256);
    mx.gate_up_scales = upload_u8(e * 2 * i * h / 32, {e, 2 * i, h / 32}, 120, 5);
    mx.down_blocks = upload_u8(e * h * i / 2, {e, h, i / 32, 16}, 0, 256);
    mx.down_scales = upload_u8(e * h * i / 32, {e, h, i / 32}, 120, 5);
    mx.gate_up_bias = Upload(RandomBf16(e * 2 * i, rng), {e, 2 * i}).cuda;
    mx.down_bias = Upload(RandomBf16(e * h, rng), {e, h}).cuda;
    return mx;
  }
  // Two distinct experts of `e` per token; token `bad_token` (if any) gets id e in slot 1.
  Tensor RandomIds(int64_t tokens, int64_t e, std::mt19937& rng, int64_t bad_token = -1) {
    std::vector<int32_t> ids(tokens * 2);
    for (int64_t t = 0; t < tokens; ++t) {
      ids[t * 2] = static_cast<int32_t>(rng() % e);
      ids[t * 2 + 1] = static_cast<int32_t>((ids[t * 2] + 1 + rng() % (e - 1)) % e);
    }
    if (bad_token >= 0) ids[bad_token * 2 + 1] = static_cast<int32_t>(e);
    return UploadI32(ids, {tokens, 2}).cuda;
  }
};

// ExpertsAddRmsNorm with the combine folded into the norm (fuse_moe_norm) against Experts then
// AddRmsNorm on a backend without it: the residual and the normalised rows bit for bit, at
// gpt-oss-20b's sizes on the GEMV (1, 2 tokens) and the GEMM form (5 tokens, and 1100: two
// rounds), with `normed` the experts' own input as the model calls it, a token with a bad expert
// id NaN both ways (backends without check_each_op, which would refuse the id up front); hidden
// sizes the fused kernel does not take (96) run the two ops.
TEST_F(Mxfp4Experts, AddRmsNormFusedEqualsTheTwoOps) {
  auto two_ops = CudaBackend::Create(CudaBackendOptions{.device = 0});
  auto fused = CudaBackend::Create(CudaBackendOptions{.device = 0, .fuse_moe_norm = true});
  ASSERT_TRUE(two_ops.ok() && fused.ok());
  std::mt19937 rng(15);
  struct Case {
    int64_t tokens, hidden, inter;
    bool bad_id, in_place;  // in_place: normed is x
  };
  for (const Case c : {Case{1, 2880, 2880, false, true}, Case{2, 2880, 1440, true, false},
                       Case{5, 2880, 2880, true, true}, Case{1100, 2880, 1440, false, true},
                       Case{3, 96, 64, false, false}}) {
    SCOPED_TRACE(::testing::Message() << c.tokens << " tokens, hidden " << c.hidden << ", inter "
                                      << c.inter << (c.bad_id ? ", a bad id" : "")
                                      << (c.in_place ? ", in place" : ""));
    const int64_t e = 4, k = 2, h = c.hidden, i = c.inter;
    const ExpertWeights mx = RandomExperts(e, h, i, rng);
    const Tensor ids = RandomIds(c.tokens, e, rng, c.bad_id ? 1 : -1);
    std::vector<float> weight_values(c.tokens * k);
    for (float& w : weight_values) w = 0.2f + 0.6f * (rng() % 100) / 100.0f;
    const Tensor weights = Upload(weight_values, {c.tokens, k}, DType::kF32).cuda;
    const std::vector<float> x_values = RandomBf16(c.tokens * h, rng);
    const std::vector<float> residual_values = RandomBf16(c.tokens * h, rng, -4, 4);
    const Tensor norm_weight = Upload(RandomBf16(h, rng, 0.5f, 1.5f), {h}).cuda;
    const GluParams glu{.limit = 1.5f, .alpha = 1.702f};
    struct Result {
      std::vector<float> residual, normed;
    };
    auto run = [&](CudaBackend& b) {
      const Tensor x = Upload(x_values, {c.tokens, h}).cuda;
      const Tensor residual = Upload(residual_values, {c.tokens, h}).cuda;
      const Tensor out = Poisoned({c.tokens, h}).cuda;
      const Tensor normed = c.in_place ? x : Poisoned({c.tokens, h}).cuda;
      EXPECT_TRUE(cuda().Synchronize().ok());
      const absl::Status st = b.ExpertsAddRmsNorm(x, ids, weights, mx, glu, out, residual,
                                                  norm_weight, 1e-5f, normed);
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_TRUE(b.Synchronize().ok());
      return Result{DownloadCuda(residual), DownloadCuda(normed)};
    };
    const Result separate = run(**two_ops), one = run(**fused);
    EXPECT_TRUE(SameBits(separate.residual, one.residual));
    EXPECT_TRUE(SameBits(separate.normed, one.normed));
    int64_t nan_rows = 0;
    for (int64_t t = 0; t < c.tokens; ++t) {
      const bool nan_row = std::isnan(one.normed[t * h]);
      nan_rows += nan_row;
      if (t < 8) {
        EXPECT_EQ(nan_row, c.bad_id && t == 1) << "token " << t;
      }
    }
    EXPECT_EQ(nan_rows, c.bad_id ? 1 : 0);
  }
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing
