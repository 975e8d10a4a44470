// Internal to the CPU backend: the one GEMM every CPU op uses, C[m, n] = A[m, k] · B[n, k]^T in
// fp32 through OpenBLAS, made batch-invariant.
//
// OpenBLAS 0.3.21 routes small problems (roughly m·n·k below 1e6) to "small matrix" kernels that
// sum in a different order than its blocked kernels, so a row's result would depend on how many
// rows share the call (tests/unit/kernels: MatmulOpTest.BatchInvariance). Padding m with zero rows
// until m·n·k reaches 2^21 always takes the blocked path, which makes every row's bits independent
// of its batch; the extra rows cost at most ~2 M multiply-adds per call, and large problems (an
// lm_head, real model layers) are never padded.
//
// That holds for the blocked kernels of the cores OpenBLAS calls SkylakeX, Cooperlake and
// Sandybridge (the test passes with each forced through OPENBLAS_CORETYPE). Its Haswell, Zen,
// Nehalem and Prescott kernels sum a row differently by its place in the tile, so on those cores
// (an AMD host, a VM whose CPU model OpenBLAS does not know) every row goes through its own
// sgemv: the same call for every row, whatever the batch; slower, since the weights are read
// once per row.
#pragma once

#include <cstdint>

namespace xserv::kernels::cpu {

void InvariantSgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float* c, int64_t ldc);

}  // namespace xserv::kernels::cpu
