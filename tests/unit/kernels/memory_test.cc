// Memory ops (Allocate, CopyFromHost/CopyToHost, Convert) on every backend, and the Tensor view
// helpers (Reshape, SliceRows, SliceLast, UnflattenLast) on the host.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

// Values that stress rounding: ties, subnormals, huge, signed zeros, infinities.
std::vector<float> TrickyFloats(std::mt19937& rng) {
  std::vector<float> v = RandomFloats(200, rng, -100.0f, 100.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* bf16 tie */, 1.01171875f, 65504.0f,
                  65520.0f /* f16 overflow */, 1e-8f, -3e-39f /* subnormal */, 3.0e38f, inf, -inf}) {
    v.push_back(x);
  }
  return v;
}

TEST_P(MemoryOpTest, CopyRoundTripsBytes) {
  std::mt19937 rng(71);
  const std::vector<float> host = TrickyFloats(rng);
  const int64_t n = static_cast<int64_t>(host.size());
  Tensor t = Alloc(DType::kF32, {n});
  ASSERT_TRUE(backend().CopyFromHost(host.data(), t).ok());
  std::vector<float> back(n);
  ASSERT_TRUE(backend().CopyToHost(t, back.data()).ok());
  EXPECT_TRUE(BitIdentical(back, host));
  const std::vector<int32_t> ids = {0, -1, 1 << 30, 7};
  EXPECT_EQ(DownloadI32(UploadI32(ids, {2, 2})), ids);
  // A strided view cannot be copied as one block.
  Tensor wide = Alloc(DType::kF32, {4, 8});
  EXPECT_FALSE(backend().CopyFromHost(host.data(), wide.SliceLast(0, 4)).ok());
  EXPECT_FALSE(backend().CopyToHost(wide.SliceLast(0, 4), back.data()).ok());
}

TEST_P(MemoryOpTest, AllocateZeroesAndRejectsBadShapes) {
  Tensor t = Alloc(DType::kF32, {3, 5});
  ASSERT_EQ(t.rank, 2);
  EXPECT_EQ(t.dim(0), 3);
  EXPECT_EQ(t.dim(1), 5);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(Download(t), std::vector<float>(15, 0.0f));
  EXPECT_FALSE(backend().Allocate(DType::kF32, {2, -1}).ok());
  EXPECT_FALSE(backend().Allocate(DType::kF32, {1, 1, 1, 1, 1}).ok());
}

TEST_P(MemoryOpTest, ConvertRoundsToNearestEvenAndWidensExactly) {
  std::mt19937 rng(72);
  const std::vector<float> host = TrickyFloats(rng);
  const int64_t n = static_cast<int64_t>(host.size());
  Tensor src = UploadF32(host, {n});
  for (DType narrow : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(narrow)));
    Tensor mid = Alloc(narrow, {n});
    ASSERT_TRUE(backend().Convert(src, mid).ok());
    Tensor back = Alloc(DType::kF32, {n});
    ASSERT_TRUE(backend().Convert(mid, back).ok());
    std::vector<float> got(n);
    ASSERT_TRUE(backend().CopyToHost(back, got.data()).ok());
    // The reference: safetensors' round-to-nearest-even encoders, checked against torch there.
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = narrow == DType::kBF16
                    ? safetensors::Bf16ToFloat(safetensors::FloatToBf16(host[i]))
                    : safetensors::F16ToFloat(safetensors::FloatToF16(host[i]));
    }
    EXPECT_TRUE(BitIdentical(got, want));
    // Narrow -> f32 -> narrow is the identity on the narrow values.
    Tensor again = Alloc(narrow, {n});
    ASSERT_TRUE(backend().Convert(back, again).ok());
    std::vector<uint16_t> a(n), b(n);
    ASSERT_TRUE(backend().CopyToHost(mid, a.data()).ok());
    ASSERT_TRUE(backend().CopyToHost(again, b.data()).ok());
    EXPECT_EQ(a, b);
  }
  // Hand-checked: 1 + 2^-8 is a bf16 tie and rounds to even (1.0); 65520 overflows f16.
  const std::vector<float> ties = {1.00390625f, 1.01171875f, 65520.0f};
  Tensor t_ties = UploadF32(ties, {3});
  Tensor bf = Alloc(DType::kBF16, {3}), f16 = Alloc(DType::kF16, {3}), out = Alloc(DType::kF32, {3});
  ASSERT_TRUE(backend().Convert(t_ties, bf).ok());
  ASSERT_TRUE(backend().Convert(bf, out).ok());
  EXPECT_EQ(Download(out), (std::vector<float>{1.0f, 1.015625f, 65536.0f}));
  ASSERT_TRUE(backend().Convert(t_ties, f16).ok());
  ASSERT_TRUE(backend().Convert(f16, out).ok());
  EXPECT_EQ(Download(out)[2], std::numeric_limits<float>::infinity());
}

TEST_P(MemoryOpTest, ConvertRejectsShapeMismatchAndIntegers) {
  Tensor a = Alloc(DType::kF32, {4}), b = Alloc(DType::kBF16, {5});
  EXPECT_FALSE(backend().Convert(a, b).ok());
  Tensor i = Alloc(DType::kI32, {4});
  EXPECT_FALSE(backend().Convert(a, i).ok());
}

// ---- Tensor views (host) ----------------------------------------------------------------------

TEST(TensorViewTest, ReshapeSliceAndUnflatten) {
  std::vector<float> data(6 * 12);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  const Tensor t = MakeTensor(data.data(), DType::kF32, DeviceType::kCpu, {6, 12});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 72);
  EXPECT_EQ(t.nbytes(), 72 * sizeof(float));
  EXPECT_EQ(t.Describe(), "F32[6, 12]");  // safetensors dtype names

  const Tensor r = t.Reshape({3, -1, 4});  // -1 inferred as 6
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.dim(1), 6);
  EXPECT_EQ(r.stride(0), 24);
  EXPECT_EQ(r.data, t.data);

  const Tensor rows = t.SliceRows(2, 5);
  EXPECT_EQ(rows.dim(0), 3);
  EXPECT_EQ(rows.as<float>()[0], 24.0f);
  EXPECT_TRUE(rows.is_contiguous());

  // A column slice keeps the row stride: a strided view of a fused projection.
  const Tensor cols = t.SliceLast(4, 10);
  EXPECT_EQ(cols.dim(1), 6);
  EXPECT_EQ(cols.stride(0), 12);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.as<float>()[0], 4.0f);

  // [6, 6] slice -> [6, 2 heads, 3 dims]; element (t, h, d) is data[t * 12 + 4 + h * 3 + d].
  const Tensor heads = cols.UnflattenLast(2, 3);
  ASSERT_EQ(heads.rank, 3);
  EXPECT_EQ(heads.dim(1), 2);
  EXPECT_EQ(heads.dim(2), 3);
  EXPECT_EQ(heads.stride(0), 12);
  EXPECT_EQ(heads.stride(1), 3);
  EXPECT_EQ(heads.stride(2), 1);
  EXPECT_EQ(heads.as<float>()[5 * heads.stride(0) + 1 * heads.stride(1) + 2], 5 * 12 + 4 + 5);

  const Tensor rows_of_cols = cols.SliceRows(1, 3);  // slicing rows of a strided view
  EXPECT_EQ(rows_of_cols.as<float>()[0], 16.0f);
  EXPECT_EQ(rows_of_cols.stride(0), 12);
}

TEST(TensorViewTest, ContiguityIgnoresUnitDims) {
  float x[8];
  const Tensor t = MakeTensor(x, DType::kF32, DeviceType::kCpu, {1, 8});
  const Tensor s = t.SliceLast(0, 8);  // stride 8 on a size-1 dim
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_TRUE(t.SliceRows(0, 1).is_contiguous());
  EXPECT_TRUE(MakeTensor(x, DType::kF32, DeviceType::kCpu, {8, 1}).Reshape({2, 4}).is_contiguous());
}

}  // namespace
}  // namespace xserv::kernels::testing
