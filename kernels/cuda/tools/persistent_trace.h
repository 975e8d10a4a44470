// What a traced persistent-ring step says about its grid barriers (xserv-persistent-bench
// --trace-shapes): per kind of matmul, how long the CTAs took to arrive after the first one did
// (the slowest CTA's lag), how long the release took to reach them after the last one arrived,
// how long x's quantisation took after it, and the phase's work from then on.
#pragma once

#include <vector>

#include "kernels/cuda/tools/persistent_step.h"

namespace xserv::kernels::cuda::bench {

// trace: num_phases x ctas x kTraceFields (PersistentStepArgs::trace) of one launch; phases:
// the host copy of the launch's phases; cycles_per_us: the SM clock.
void PrintBarrierTrace(const std::vector<unsigned long long>& trace,
                       const std::vector<StreamPhase>& phases, int ctas, double cycles_per_us);

}  // namespace xserv::kernels::cuda::bench
