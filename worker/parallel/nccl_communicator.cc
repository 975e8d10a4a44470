#include "worker/parallel/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/parallel/peer_group.h"

namespace xserv::parallel {
namespace {

absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("NCCL ", what, ": ", ncclGetErrorString(result)));
}

#define RETURN_IF_NCCL_ERROR(expr) RETURN_IF_ERROR(NcclStatus((expr), #expr))

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int world_size, ncclComm_t comm, cudaStream_t stream, float* scratch,
                   std::unique_ptr<PeerGroup> peers)
      : rank_(rank),
        world_size_(world_size),
        comm_(comm),
        stream_(stream),
        scratch_(scratch),
        peers_(std::move(peers)) {}
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    peers_.reset();
    ncclCommDestroy(comm_);
    cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  MemoryKind memory() const override { return MemoryKind::kDevice; }

  absl::Status AllReduceTyped(void* data, size_t count, ElementType type, ReduceOp op) override {
    if (count == 0) return absl::OkStatus();
    const int64_t bytes = static_cast<int64_t>(count) * 2;
    // Decided from the call alone, so every rank takes the same path.
    if (peers_ != nullptr && type == ElementType::kBF16 && op == ReduceOp::kSum &&
        bytes <= peers_->max_bytes() && bytes % 16 == 0) {
      return peers_->AllReduceBf16(data, static_cast<int64_t>(count), stream_);
    }
    const ncclDataType_t nccl_type = type == ElementType::kBF16 ? ncclBfloat16 : ncclFloat32;
    RETURN_IF_NCCL_ERROR(
        ncclAllReduce(data, data, count, nccl_type, NcclOp(op), comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status AllReduce(std::span<float> data, ReduceOp op) override {
    return AllReduceTyped(data.data(), data.size(), ElementType::kF32, op);
  }
  absl::Status AllGather(std::span<const float> send, std::span<float> recv) override {
    if (recv.size() != send.size() * static_cast<size_t>(world_size_)) {
      return absl::InvalidArgumentError("AllGather: recv must hold world_size * send elements");
    }
    RETURN_IF_NCCL_ERROR(
        ncclAllGather(send.data(), recv.data(), send.size(), ncclFloat32, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Broadcast(std::span<std::byte> data, int root) override {
    RETURN_IF_NCCL_ERROR(
        ncclBroadcast(data.data(), data.data(), data.size(), ncclUint8, root, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Send(std::span<const std::byte> data, int dst, int tag) override {
    // NCCL matches point-to-point calls by order per peer, not by tag.
    RETURN_IF_NCCL_ERROR(ncclSend(data.data(), data.size(), ncclUint8, dst, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Recv(std::span<std::byte> data, int src, int tag) override {
    RETURN_IF_NCCL_ERROR(ncclRecv(data.data(), data.size(), ncclUint8, src, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Barrier() override {
    RETURN_IF_NCCL_ERROR(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("Barrier: ", cudaGetErrorString(err)));
    }
    return absl::OkStatus();
  }

 private:
  const int rank_, world_size_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  float* scratch_;  // one device float for Barrier
  std::unique_ptr<PeerGroup> peers_;  // null: every all-reduce through NCCL
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size || o.prefix.empty() ||
      o.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: rank ", o.rank, " of ",
                                                   o.world_size, ", prefix '", o.prefix,
                                                   "' and a store are required"));
  }
  const std::string key = o.prefix + "/nccl-id";
  ncclUniqueId id;
  if (o.rank == 0) {
    RETURN_IF_NCCL_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(o.store->Set(key, std::string(id.internal, sizeof(id.internal))));
  } else {
    ASSIGN_OR_RETURN(const std::string bytes, o.store->Get(key, o.timeout));
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat("NCCL id under ", key, " has ", bytes.size(),
                                              " bytes, expected ", sizeof(id.internal)));
    }
    std::copy(bytes.begin(), bytes.end(), id.internal);
  }
  ncclComm_t comm = nullptr;
  RETURN_IF_NCCL_ERROR(ncclCommInitRank(&comm, o.world_size, id, o.rank));
  float* scratch = nullptr;
  if (const cudaError_t err = cudaMalloc(&scratch, sizeof(float)); err != cudaSuccess) {
    ncclCommDestroy(comm);
    return absl::ResourceExhaustedError(absl::StrCat("NCCL scratch: ", cudaGetErrorString(err)));
  }
  std::unique_ptr<PeerGroup> peers;
  if (o.peer_max_bytes > 0 && o.world_size > 1) {
    auto group = PeerGroup::Create(o.rank, o.world_size, *o.store, o.prefix, o.peer_max_bytes,
                                   o.peer_one_shot_max_bytes, o.timeout);
    if (!group.ok()) {
      ncclCommDestroy(comm);
      cudaFree(scratch);
      return group.status();
    }
    peers = std::move(*group);
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(o.rank, o.world_size, comm, static_cast<cudaStream_t>(o.stream),
                           scratch, std::move(peers)));
}

}  // namespace xserv::parallel
