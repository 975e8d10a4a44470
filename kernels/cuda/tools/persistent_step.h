// A measurement for issue 15's batch-1 target (xserv-persistent-bench): how fast one persistent
// kernel streams a decode step's FP8 weights when the step's matmuls are phases separated by grid
// barriers instead of kernels, and whether loading the next phase's first weights before each
// barrier (as PDL does before a kernel's wait) hides the barriers. Not a model path: no norms,
// attention or activation, only the weight-streaming skeleton of Qwen3-8B's layers, with the
// decode GEMV's arithmetic (gemv.cu, FP8 2x4 tile) so that its outputs can be checked against
// the GEMV kernels' bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda::bench {

// out[n] = x[k] · dequant(w)[n, k]^T as the one-row FP8 GEMV computes it (bf16 x and out, E4M3
// codes [n, k] with 128 x 128 block scales). w null: a latency phase, standing for a small op
// between matmuls: CTA 0 copies x's first n values to out.
struct StreamPhase {
  const uint8_t* w = nullptr;
  const float* scales = nullptr;
  const void* x = nullptr;
  void* out = nullptr;
  int n = 0, k = 0;
};

struct PersistentStepArgs {
  const StreamPhase* phases = nullptr;  // device memory, num_phases of them
  int num_phases = 0;
  unsigned* barrier = nullptr;  // zeroed before each launch (the barriers count up from it)
  bool prefetch = true;         // the next phase's first batch of loads before each barrier
  // false: no barriers, for timing only (a phase then reads its x before the phase that writes
  // it is done): what the phases cost without waiting on one another.
  bool barriers = true;
  // The shared-memory ring form instead (persistent_ring.cu): one CTA of 16 warps per SM owns a
  // block of each phase's rows and copies them, a chunk of rows at a time, into two halves of
  // shared memory, the next chunk (of this phase or the next) in flight while the current one
  // computes, across the barriers. Outputs the same bits as the GEMV.
  bool smem_ring = false;
  // ... with FP8 x FP8 MMAs on whole 16-row tiles, x quantised per phase as the W8A8 GEMM's
  // (persistent_ring_w8a8.cu): W8A8 results, not the GEMV's bits.
  bool ring_w8a8 = false;
  // The W8A8 ring's shape: stages x inputs per chunk, one of 5x2048 (default), 6x2048, 3x4096,
  // 8x1024, 12x1024, 16x512 (each fits one SM's shared memory). It honours `barriers` too.
  int ring_stages = 5, ring_chunk_cols = 2048;
  // ... its rows copied by the TMA unit (one bulk copy per row of a chunk, an mbarrier per
  // stage) instead of every thread's 16-byte cp.async.
  bool ring_bulk = false;
  // ... streaming only, for timing: the chunks arrive and are released, no arithmetic (the
  // outputs are then zeros).
  bool ring_no_math = false;
  // ... the phases' weights in PackRingTiles' layout, each chunk one bulk copy (ring_bulk).
  bool ring_tiled = false;
  // ... a producer warp issuing the copies, released stage by stage by the computing warps, so
  // that they stay in flight across barriers (ring_bulk).
  bool ring_producer_warp = false;
  // ... and, with ring_tiled, the producer asks this many chunks further ahead into L2
  // (cp.async.bulk.prefetch), so that HBM streams on while a full ring waits.
  int ring_l2_ahead = 0;
  // Non-null (the W8A8 ring only): per phase and CTA, kTraceFields timestamps of its thread 0
  // (PhaseTrace), to tell a barrier's wait for the slowest CTA from its propagation.
  unsigned long long* trace = nullptr;
};

// A traced phase's timestamps, each CTA's thread 0: %globaltimer (ns, comparable across SMs)
// and clock64 (cycles, this SM's) when it arrives at the barrier before the phase, when the
// barrier releases it, and when x is quantised (the phase's first MMA may start).
enum PhaseTrace {
  kArriveNs,
  kReleaseNs,
  kReadyNs,
  kArriveCycles,
  kReleaseCycles,
  kReadyCycles,
  kTraceFields
};

// w (E4M3 [n, k], n a multiple of 16, k of chunk_cols) into the tiled W8A8 ring's layout for
// chunks of chunk_cols inputs: every chunk of a 16-row tile contiguous, its rows swizzled so
// that a quarter-warp's rows fall in different banks (persistent_ring_w8a8.cu says how).
cudaError_t PackRingTiles(const uint8_t* w, int n, int k, int chunk_cols, uint8_t* out,
                          cudaStream_t stream);

// One cooperative launch of the persistent kernel over every resident CTA.
cudaError_t LaunchPersistentStep(const PersistentStepArgs& args, int max_k, cudaStream_t stream);

// The ring form's launch (LaunchPersistentStep calls it for smem_ring); max_k <= 12288.
cudaError_t LaunchPersistentRing(const PersistentStepArgs& args, int max_k, cudaStream_t stream);
cudaError_t LaunchPersistentRingW8A8(const PersistentStepArgs& args, int max_k,
                                     cudaStream_t stream);

// The latency phase as its own kernel (PDL-launched, waiting before it writes), for the baseline
// of separate kernels.
cudaError_t LaunchCopyPhase(const StreamPhase& phase, cudaStream_t stream);

}  // namespace xserv::kernels::cuda::bench
