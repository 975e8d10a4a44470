// CudaBackend: creation, memory, dtype conversion and the launch-status plumbing. The ops live
// in ops_*.cc, one file per family.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/op_util.h"

namespace xserv::kernels::cuda {

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  int count = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&count));
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " requested, ", count, " visible"));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(options));
  RETURN_IF_CUDA_ERROR(cudaSetDevice(options.device));
  // Non-blocking: the legacy default stream (used by stray cudaMemcpy calls elsewhere) does not
  // serialise with ours.
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&backend->sm_count_, cudaDevAttrMultiProcessorCount,
                                              options.device));
  ASSIGN_OR_RETURN(backend->gemm_, GemmRunner::Create(
                                      {.batch_invariant = options.batch_invariant,
                                       .invariant_reference_rows = options.invariant_reference_rows,
                                       .gemv = options.gemv,
                                       .pdl = options.pdl,
                                       .autotune = options.gemm_autotune}));
  if (options.profile_ops) backend->profiler_ = std::make_unique<OpProfiler>();
  if (options.fused_mlp_row) {  // before any graph captures the op
    ASSIGN_OR_RETURN(backend->mlp_row_scratch_,
                     backend->Allocate(DType::kF32, {kMlpRowMaxHidden + 4}));
    RETURN_IF_CUDA_ERROR(
        cudaMemset(backend->mlp_row_scratch_.view().data, 0, (kMlpRowMaxHidden + 4) * 4));
  }
  return backend;
}

absl::Status CudaBackend::HoldForProfile(int64_t microseconds) {
  if (profiler_ == nullptr) return absl::FailedPreconditionError("profile_ops is off");
  return profiler_->Hold(microseconds, stream_);
}

absl::StatusOr<std::vector<OpTime>> CudaBackend::TakeOpProfile() {
  if (profiler_ == nullptr) return absl::FailedPreconditionError("profile_ops is off");
  RETURN_IF_ERROR(Synchronize());
  return profiler_->Take();
}

absl::Status CudaBackend::BeginCapture() {
  if (options_.check_each_op || profiler_ != nullptr) {
    return absl::FailedPreconditionError("graph capture is off in check and profile modes");
  }
  if (capturing_) return absl::FailedPreconditionError("already capturing");
  // Thread-local mode: CUDA calls of other threads (e.g. a communicator's) are not captured
  // and do not invalidate this capture.
  RETURN_IF_CUDA_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackend::EndCapture() {
  if (!capturing_) return absl::FailedPreconditionError("not capturing");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (end != cudaSuccess) {
    (void)cudaGetLastError();  // an invalidated capture is not sticky
    if (graph != nullptr) cudaGraphDestroy(graph);
    return absl::InternalError(absl::StrCat("graph capture failed: ", cudaGetErrorString(end)));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  RETURN_IF_CUDA_ERROR(made);
  graphs_.push_back(exec);
  return static_cast<int64_t>(graphs_.size()) - 1;
}

absl::Status CudaBackend::Replay(int64_t graph) {
  if (graph < 0 || graph >= static_cast<int64_t>(graphs_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no graph ", graph));
  }
  RETURN_IF_CUDA_ERROR(cudaGraphLaunch(graphs_[graph], stream_));
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    for (cudaGraphExec_t exec : graphs_) cudaGraphExecDestroy(exec);
    for (int slot = 0; slot < 2; ++slot) {
      if (staging_[slot] != nullptr) cudaFreeHost(staging_[slot]);
      if (staging_done_[slot] != nullptr) cudaEventDestroy(staging_done_[slot]);
    }
    gemm_.reset();
    profiler_.reset();
    cudaStreamDestroy(stream_);
  }
}

absl::Status CudaBackend::LaunchedWeights(const char* op, cudaError_t launch_error, int64_t n,
                                          int64_t k, double weight_bytes) {
  if (profiler_ == nullptr || launch_error != cudaSuccess) return Launched(op, launch_error);
  RETURN_IF_ERROR(profiler_->Record(absl::StrCat(op, " ", n, "x", k), stream_, weight_bytes));
  return WaitIfChecking(op);
}

absl::Status CudaBackend::Launched(const char* op, cudaError_t launch_error) {
  if (launch_error != cudaSuccess) {
    return absl::InternalError(absl::StrCat(op, ": launch failed: ", cudaGetErrorName(launch_error),
                                            " (", cudaGetErrorString(launch_error), ")"));
  }
  if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->Record(op, stream_));
  return WaitIfChecking(op);
}

absl::Status CudaBackend::WaitIfChecking(const char* op) {
  if (!options_.check_each_op) return absl::OkStatus();
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) {
    return absl::InternalError(absl::StrCat(op, ": kernel failed: ", cudaGetErrorName(err), " (",
                                            cudaGetErrorString(err), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Buffer> CudaBackend::Allocate(DType dtype, std::span<const int64_t> shape) {
  if (shape.size() > kMaxRank) return OpError("Allocate", "rank above 4");
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return OpError("Allocate", "negative dimension");
    count *= d;
  }
  // Whole 256-byte granules (cudaMalloc's alignment) so vector kernels may read a tail safely;
  // never zero bytes, so even an empty tensor has a non-null pointer like the CPU backend's.
  const size_t bytes = ((std::max<int64_t>(count, 1) * DTypeSize(dtype) + 255) / 256) * 256;
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
    return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of ", bytes, " bytes failed: ",
                                                     cudaGetErrorString(err)));
  }
  Buffer buffer(MakeTensor(data, dtype, DeviceType::kCuda, shape), [](void* p) { cudaFree(p); });
  // Zeroed on our stream, so fresh KV blocks and scratch are deterministic before any op reads.
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(data, 0, bytes, stream_));
  return buffer;
}

absl::Status CudaBackend::Reserve(Buffer& buffer, size_t bytes) {
  if (!buffer.empty() && static_cast<size_t>(buffer.view().nbytes()) >= bytes) {
    return absl::OkStatus();
  }
  // Grow geometrically so a workload settles after a few steps.
  const size_t capacity = std::max<size_t>(bytes, buffer.empty() ? 4096 : 2 * buffer.view().nbytes());
  ASSIGN_OR_RETURN(Buffer grown, Allocate(DType::kU8, {static_cast<int64_t>(capacity)}));
  // A captured graph may still point at the old buffer: keep it alive with the backend.
  if (!buffer.empty()) retired_.push_back(std::move(buffer));
  buffer = std::move(grown);
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyFromHost(const void* src, const Tensor& dst) {
  RETURN_IF_ERROR(ExpectCuda("CopyFromHost", "dst", dst));
  RETURN_IF_ERROR(ExpectContiguous("CopyFromHost", "dst", dst));
  const size_t bytes = dst.nbytes();
  if (bytes < kStagedCopyBytes) {
    // From pageable memory the copy is staged before this returns, so `src` may be reused at once.
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dst.data, src, bytes, cudaMemcpyHostToDevice, stream_));
    return Launched("CopyFromHost", cudaSuccess);
  }
  // Large copies (weights at load time): through two pinned chunks, so the host's copy of chunk
  // i + 1 (page faults of an mmapped checkpoint included) overlaps the DMA of chunk i.
  for (int slot = 0; slot < 2 && staging_[slot] == nullptr; ++slot) {
    RETURN_IF_CUDA_ERROR(cudaMallocHost(&staging_[slot], kStagingChunkBytes));
    RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&staging_done_[slot], cudaEventDisableTiming));
    RETURN_IF_CUDA_ERROR(cudaEventRecord(staging_done_[slot], stream_));
  }
  const auto* from = static_cast<const std::byte*>(src);
  auto* to = static_cast<std::byte*>(dst.data);
  int slot = 0;
  for (size_t offset = 0; offset < bytes; offset += kStagingChunkBytes, slot ^= 1) {
    const size_t n = std::min(kStagingChunkBytes, bytes - offset);
    RETURN_IF_CUDA_ERROR(cudaEventSynchronize(staging_done_[slot]));  // its last DMA is done
    std::memcpy(staging_[slot], from + offset, n);
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(to + offset, staging_[slot], n, cudaMemcpyHostToDevice, stream_));
    RETURN_IF_CUDA_ERROR(cudaEventRecord(staging_done_[slot], stream_));
  }
  return Launched("CopyFromHost", cudaSuccess);
}

absl::Status CudaBackend::CopyToHost(const Tensor& src, void* dst) {
  RETURN_IF_ERROR(ExpectCuda("CopyToHost", "src", src));
  RETURN_IF_ERROR(ExpectContiguous("CopyToHost", "src", src));
  RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  return Synchronize();
}

absl::Status CudaBackend::Zero(const Tensor& t) {
  RETURN_IF_ERROR(ExpectCuda("Zero", "t", t));
  RETURN_IF_ERROR(ExpectContiguous("Zero", "t", t));
  if (t.numel() > 0) RETURN_IF_CUDA_ERROR(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
  return Launched("Zero", cudaSuccess);
}

absl::Status CudaBackend::Convert(const Tensor& src, const Tensor& dst) {
  constexpr const char* kOp = "Convert";
  RETURN_IF_ERROR(ExpectCuda(kOp, "src", src));
  RETURN_IF_ERROR(ExpectCuda(kOp, "dst", dst));
  RETURN_IF_ERROR(ExpectSameShape(kOp, src, dst));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "src", src));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "dst", dst));
  if (src.dtype == dst.dtype) {
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    return Launched(kOp, cudaSuccess);
  }
  const std::optional<ElemType> from = ElemTypeOf(src.dtype), to = ElemTypeOf(dst.dtype);
  if (!from || !to) {
    return OpError(kOp, absl::StrCat("unsupported conversion ", src.Describe(), " -> ",
                                     dst.Describe()));
  }
  return Launched(kOp, LaunchConvert(src.data, *from, dst.data, *to, src.numel(), stream_));
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->Collect());
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckIndices(const char* op, const char* what, const Tensor& indices,
                                       int64_t limit) {
  if (!options_.check_each_op || indices.numel() == 0) return absl::OkStatus();
  std::vector<int32_t> host(indices.numel());
  RETURN_IF_ERROR(CopyToHost(indices, host.data()));
  for (size_t i = 0; i < host.size(); ++i) {
    if (host[i] < 0 || host[i] >= limit) {
      return OpError(op, absl::StrCat(what, " ", host[i], " at ", i, " outside [0, ", limit, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckAttentionMetadata(const Tensor& q, const KvLayer& kv,
                                                 const AttentionBatch& batch,
                                                 int sliding_window) {
  constexpr const char* kOp = "Attention";
  const int n = batch.num_seqs;
  const int64_t width = batch.block_tables.dim(1);
  std::vector<int32_t> qs(n + 1), lens(n), tables(static_cast<size_t>(n) * width);
  // Rows of the block table may be strided; copy row by row through a contiguous view.
  RETURN_IF_ERROR(CopyToHost(batch.query_start.SliceRows(0, n + 1), qs.data()));
  RETURN_IF_ERROR(CopyToHost(batch.seq_lens.SliceRows(0, n), lens.data()));
  for (int s = 0; s < n; ++s) {
    RETURN_IF_ERROR(CopyToHost(batch.block_tables.SliceRows(s, s + 1), &tables[s * width]));
  }
  if (qs[0] != 0 || qs[n] != q.dim(0)) return OpError(kOp, "query_start does not cover q");
  const int64_t block_size = kv.k.dim(1), num_blocks = kv.k.dim(0);
  for (int s = 0; s < n; ++s) {
    const int64_t q_len = qs[s + 1] - qs[s];
    if (q_len < 0 || lens[s] < q_len || (lens[s] + block_size - 1) / block_size > width) {
      return OpError(kOp, absl::StrCat("sequence ", s, ": ", q_len, " queries, ", lens[s],
                                       " kv tokens, block table width ", width));
    }
    for (int64_t b = FirstReadBlock(lens[s], q_len, block_size, sliding_window);
         b < (lens[s] + block_size - 1) / block_size; ++b) {
      const int32_t block = tables[s * width + b];
      if (block < 0 || block >= num_blocks) {
        return OpError(kOp, absl::StrCat("sequence ", s, " block ", b, " is ", block,
                                         ", pool has ", num_blocks));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cuda
