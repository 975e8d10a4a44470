// CpuBackend::Sample: the reference itself, rows spread over the pool (each row is independent,
// so the result does not depend on the pool size).
#include <span>

#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {

absl::Status CpuBackend::Sample(const Tensor& logits, std::span<const SampleRowSpec> rows,
                                std::span<SampleRowResult> results) {
  RETURN_IF_ERROR(ExpectSampleOperands(logits, rows, results.size()));
  const Rows<const float> in = AsRows<const float>(logits);
  pool_.ParallelFor(in.rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      results[r] = SampleRowReference(std::span<const float>(in.row(r), in.cols), rows[r]);
    }
  });
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cpu
