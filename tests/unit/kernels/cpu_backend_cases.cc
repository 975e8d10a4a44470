// Instantiates every op suite for the CPU backend. Two thread counts: the backend promises results
// that do not depend on its pool size (cpu_backend.h), and a split-range bug in the pool shows up
// only with more than one thread. 3 threads make uneven splits of most row counts.
#include <memory>

#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

BackendCase CpuCase(int num_threads) {
  return BackendCase{
      .name = "Cpu" + std::to_string(num_threads) + "Threads",
      .make = [num_threads]() -> std::unique_ptr<Backend> {
        return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{.num_threads = num_threads});
      }};
}

XSERV_INSTANTIATE_BACKEND_OP_TESTS(Cpu, ::testing::Values(CpuCase(1), CpuCase(3)));

}  // namespace
}  // namespace xserv::kernels::testing
