#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

namespace xserv::kernels::cpu {
namespace {

// Every call computes at least this many multiply-adds. OpenBLAS 0.3.21 takes its small-matrix
// path only below ~1e6 (measured by MatmulOpTest.BatchInvariance: no shape with m·n·k ≥ 1.47e6
// ever differed), so 2^21 leaves a margin; large problems (e.g. an lm_head) are never padded.
constexpr int64_t kMinWork = int64_t{1} << 21;

// Whether InvariantSgemm uses OpenBLAS's blocked GEMM on this CPU (else one sgemv per row).
bool BlockedGemmIsInvariant() {
  // OpenBLAS picks its kernels once, at load (DYNAMIC_ARCH); the answer never changes.
  static const bool invariant = [] {
    std::string core = openblas_get_corename();
    for (char& ch : core) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    constexpr std::array<const char*, 3> kVerified = {"skylakex", "cooperlake", "sandybridge"};
    return std::find(kVerified.begin(), kVerified.end(), core) != kVerified.end();
  }();
  return invariant;
}

}  // namespace

void InvariantSgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (!BlockedGemmIsInvariant()) {
    for (int64_t r = 0; r < m; ++r) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k),
                  1.0f, b, static_cast<blasint>(ldb), a + r * lda, 1, 0.0f, c + r * ldc, 1);
    }
    return;
  }
  const int64_t min_rows = (kMinWork + n * k - 1) / std::max<int64_t>(1, n * k);
  if (m >= min_rows) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c,
                static_cast<blasint>(ldc));
    return;
  }
  // Pad with zero rows into scratch, compute, copy the real rows out.
  thread_local std::vector<float> padded_a, padded_c;
  padded_a.assign(static_cast<size_t>(min_rows * k), 0.0f);
  padded_c.resize(static_cast<size_t>(min_rows * n));
  for (int64_t r = 0; r < m; ++r) std::memcpy(&padded_a[r * k], a + r * lda, k * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(min_rows),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, padded_a.data(),
              static_cast<blasint>(k), b, static_cast<blasint>(ldb), 0.0f, padded_c.data(),
              static_cast<blasint>(n));
  for (int64_t r = 0; r < m; ++r) std::memcpy(c + r * ldc, &padded_c[r * n], n * sizeof(float));
}

}  // namespace xserv::kernels::cpu
