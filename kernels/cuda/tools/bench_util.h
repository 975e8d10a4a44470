// Shared pieces of the kernel benchmark programs (xserv-gemv-bench, xserv-moe-bench): a CUDA
// error check that exits, and the best-of-N time of a captured graph of calls.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(expr)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (expr);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

namespace xserv::kernels::cuda::bench {

// Captures call(i, stream) for i = 0 .. calls - 1 into a graph and returns the best of `repeats`
// replays (after one warm-up replay) in µs per call. Run every distinct call once directly
// before, so that one-time setup (plans, kernel attributes) stays out of the capture.
template <typename Call>
double TimeGraphOfCalls(const Call& call, int calls, int repeats, cudaStream_t stream) {
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) call(i, stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  float best = 1e30f;
  for (int rep = 0; rep < repeats + 1; ++rep) {  // the first replay warms up
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) best = std::min(best, ms);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return best * 1000.0 / calls;
}

}  // namespace xserv::kernels::cuda::bench
