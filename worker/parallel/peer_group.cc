#include "worker/parallel/peer_group.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace xserv::parallel {
namespace {

// What a rank publishes about its buffer.
struct Advert {
  int64_t pid = 0;
  int32_t device = 0;
  uint64_t pointer = 0;  // valid in the publishing process only
  cudaIpcMemHandle_t handle{};
};

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerGroup>> PeerGroup::Create(int rank, int world,
                                                             KeyValueStore& store,
                                                             const std::string& prefix,
                                                             int64_t max_bytes,
                                                             std::chrono::milliseconds timeout) {
  if (world < 2 || world > kPeerMaxRanks || rank < 0 || rank >= world || max_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer group: rank ", rank, " of ", world, ", max_bytes ", max_bytes));
  }
  std::unique_ptr<PeerGroup> group(new PeerGroup());
  PeerBuffers& b = group->buffers_;
  b.rank = rank;
  b.world = world;
  const int64_t quantum = 16LL * world;
  b.half_bytes = (max_bytes + quantum - 1) / quantum * quantum;

  // Set up locally; any failure is published as "no" so that the peers do not wait for us.
  Advert mine;
  absl::Status local = [&]() -> absl::Status {
    RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&mine.device), "cudaGetDevice"));
    const size_t bytes = static_cast<size_t>(kPeerFlagBytes + 2 * b.half_bytes);
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&group->own_, bytes), "peer buffer"));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(group->own_, 0, bytes), "peer buffer"));
    RETURN_IF_ERROR(CudaStatus(
        cudaMalloc(reinterpret_cast<void**>(&b.counters), 2 * kPeerBlocks * sizeof(uint32_t)),
        "peer counters"));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(b.counters, 0, 2 * kPeerBlocks * sizeof(uint32_t)),
                               "peer counters"));
    // The zeroed flags must be in place before any peer can map them and write.
    RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "peer buffer"));
    RETURN_IF_ERROR(CudaStatus(cudaIpcGetMemHandle(&mine.handle, group->own_), "IPC handle"));
    mine.pid = static_cast<int64_t>(getpid());
    mine.pointer = reinterpret_cast<uintptr_t>(group->own_);
    b.buffers[rank] = group->own_;
    return absl::OkStatus();
  }();
  const std::string key = absl::StrCat(prefix, "/peer-buffer/");
  std::string advert(local.ok() ? sizeof(Advert) : 0, '\0');
  if (local.ok()) std::memcpy(advert.data(), &mine, sizeof(Advert));
  RETURN_IF_ERROR(store.Set(absl::StrCat(key, rank), advert));

  // Map every peer's buffer.
  for (int peer = 0; peer < world && local.ok(); ++peer) {
    if (peer == rank) continue;
    ASSIGN_OR_RETURN(const std::string bytes, store.Get(absl::StrCat(key, peer), timeout));
    if (bytes.size() != sizeof(Advert)) {
      local = absl::UnavailableError(absl::StrCat("rank ", peer, " has no peer buffer"));
      break;
    }
    Advert theirs;
    std::memcpy(&theirs, bytes.data(), sizeof(Advert));
    if (theirs.pid == mine.pid) {  // ranks as threads of one process: plain peer access
      int can = 0;
      cudaDeviceCanAccessPeer(&can, mine.device, theirs.device);
      if (!can && theirs.device != mine.device) {
        local = absl::UnavailableError(
            absl::StrCat("no peer access from device ", mine.device, " to ", theirs.device));
        break;
      }
      if (theirs.device != mine.device) {
        const cudaError_t err = cudaDeviceEnablePeerAccess(theirs.device, 0);
        if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
          local = CudaStatus(err, "cudaDeviceEnablePeerAccess");
          break;
        }
        cudaGetLastError();  // clear an already-enabled error
      }
      b.buffers[peer] = reinterpret_cast<void*>(theirs.pointer);
    } else {
      void* mapped = nullptr;
      local = CudaStatus(
          cudaIpcOpenMemHandle(&mapped, theirs.handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
      if (!local.ok()) break;
      group->ipc_mapped_.push_back(mapped);
      b.buffers[peer] = mapped;
    }
  }

  // Agree: peer buffers only if every rank mapped every peer.
  const std::string agree = absl::StrCat(prefix, "/peer-ok/");
  RETURN_IF_ERROR(store.Set(absl::StrCat(agree, rank), local.ok() ? "1" : local.ToString()));
  bool all_ok = local.ok();
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    ASSIGN_OR_RETURN(const std::string verdict, store.Get(absl::StrCat(agree, peer), timeout));
    if (verdict != "1") {
      if (all_ok) spdlog::warn("peer all-reduce off: rank {}: {}", peer, verdict);
      all_ok = false;
    }
  }
  if (!local.ok()) spdlog::warn("peer all-reduce off: rank {}: {}", rank, local.ToString());
  if (!all_ok) return std::unique_ptr<PeerGroup>();
  spdlog::info("peer all-reduce on: rank {} of {}, messages up to {} bytes", rank, world,
               b.half_bytes);
  return group;
}

PeerGroup::~PeerGroup() {
  for (void* p : ipc_mapped_) cudaIpcCloseMemHandle(p);
  cudaFree(own_);
  cudaFree(buffers_.counters);
}

absl::Status PeerGroup::AllReduceBf16(void* data, int64_t count, bool two_shot, void* stream) {
  return CudaStatus(LaunchPeerAllReduceBf16(buffers_, data, count, two_shot,
                                            static_cast<cudaStream_t>(stream)),
                    "peer all-reduce");
}

}  // namespace xserv::parallel
