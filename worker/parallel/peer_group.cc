#include "worker/parallel/peer_group.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace xserv::parallel {
namespace {

constexpr uint32_t kAdvertVersion = 1;

// What a rank publishes about its buffer and settings.
struct Advert {
  uint32_t version = kAdvertVersion;
  int32_t device = 0;
  char boot_id[40] = {};           // the host's (/proc/sys/kernel/random/boot_id): same host?
  uint64_t process_nonce[2] = {};  // same process? (pids repeat across PID namespaces)
  uint64_t pointer = 0;            // valid in the publishing process only
  int64_t half_bytes = 0, one_shot_max_bytes = 0;
  cudaIpcMemHandle_t handle{};
};

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // a failed call must not be reported again by the next launch's check
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Random once per process.
const uint64_t* ProcessNonce() {
  static const uint64_t* nonce = [] {
    static uint64_t value[2];
    std::random_device device;
    for (uint64_t& v : value) v = (uint64_t{device()} << 32) ^ device();
    return value;
  }();
  return nonce;
}

void ReadBootId(char (&out)[40]) {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  std::strncpy(out, id.c_str(), sizeof(out) - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerGroup>> PeerGroup::Create(
    int rank, int world, KeyValueStore& store, const std::string& prefix, int64_t max_bytes,
    int64_t one_shot_max_bytes, std::chrono::milliseconds timeout) {
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
  group->one_shot_max_bytes_ = one_shot_max_bytes;

  // Set up locally; any failure is published as "no" so that the peers do not wait for us.
  Advert mine;
  ReadBootId(mine.boot_id);
  std::memcpy(mine.process_nonce, ProcessNonce(), sizeof(mine.process_nonce));
  mine.half_bytes = b.half_bytes;
  mine.one_shot_max_bytes = one_shot_max_bytes;
  absl::Status local = [&]() -> absl::Status {
    RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&mine.device), "cudaGetDevice"));
    const size_t bytes = static_cast<size_t>(kPeerFlagBytes + 2 * b.half_bytes);
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&group->own_, bytes), "peer buffer"));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(group->own_, 0, bytes), "peer buffer"));
    RETURN_IF_ERROR(CudaStatus(
        cudaMalloc(reinterpret_cast<void**>(&b.counters), 2 * kPeerBlocks * sizeof(uint32_t)),
        "peer counters"));
    RETURN_IF_ERROR(
        CudaStatus(cudaMemset(b.counters, 0, 2 * kPeerBlocks * sizeof(uint32_t)), "peer counters"));
    // The zeroed flags must be in place before any peer can map them and write.
    RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "peer buffer"));
    RETURN_IF_ERROR(CudaStatus(cudaIpcGetMemHandle(&mine.handle, group->own_), "IPC handle"));
    mine.pointer = reinterpret_cast<uintptr_t>(group->own_);
    b.buffers[rank] = group->own_;
    return absl::OkStatus();
  }();
  const std::string key = absl::StrCat(prefix, "/peer-buffer/");
  std::string advert(local.ok() ? sizeof(Advert) : 0, '\0');
  if (local.ok()) std::memcpy(advert.data(), &mine, sizeof(Advert));
  RETURN_IF_ERROR(store.Set(absl::StrCat(key, rank), advert));

  // Map every peer's buffer; a failure (a store read included) becomes this rank's "no".
  for (int peer = 0; peer < world && local.ok(); ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::string> bytes = store.Get(absl::StrCat(key, peer), timeout);
    if (!bytes.ok()) {
      local = bytes.status();
      break;
    }
    Advert theirs;
    if (bytes->size() != sizeof(Advert) ||
        (std::memcpy(&theirs, bytes->data(), sizeof(Advert)), theirs.version != kAdvertVersion)) {
      local = absl::UnavailableError(absl::StrCat("rank ", peer, " has no peer buffer"));
      break;
    }
    if (theirs.half_bytes != mine.half_bytes ||
        theirs.one_shot_max_bytes != mine.one_shot_max_bytes) {
      local = absl::FailedPreconditionError(
          absl::StrCat("rank ", peer, " has other peer all-reduce settings (max ",
                       theirs.half_bytes, ", one-shot max ", theirs.one_shot_max_bytes,
                       " bytes; here ", mine.half_bytes, ", ", mine.one_shot_max_bytes, ")"));
      break;
    }
    if (std::strncmp(theirs.boot_id, mine.boot_id, sizeof(mine.boot_id)) != 0) {
      local = absl::UnavailableError(absl::StrCat("rank ", peer, " runs on another host"));
      break;
    }
    if (std::memcmp(theirs.process_nonce, mine.process_nonce, sizeof(mine.process_nonce)) == 0) {
      // Ranks as threads of one process: plain peer access (IPC cannot open its own handles).
      if (theirs.device != mine.device) {
        int can = 0;
        cudaDeviceCanAccessPeer(&can, mine.device, theirs.device);
        if (!can) {
          local = absl::UnavailableError(
              absl::StrCat("no peer access from device ", mine.device, " to ", theirs.device));
          break;
        }
        const cudaError_t err = cudaDeviceEnablePeerAccess(theirs.device, 0);
        cudaGetLastError();  // an already-enabled error must not stick
        if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
          local = CudaStatus(err, "cudaDeviceEnablePeerAccess");
          break;
        }
      }
      b.buffers[peer] = reinterpret_cast<void*>(theirs.pointer);
    } else {
      void* mapped = nullptr;
      local =
          CudaStatus(cudaIpcOpenMemHandle(&mapped, theirs.handle, cudaIpcMemLazyEnablePeerAccess),
                     "cudaIpcOpenMemHandle");
      if (!local.ok()) break;
      group->ipc_mapped_.push_back(mapped);
      b.buffers[peer] = mapped;
    }
  }

  // Agree: peer buffers only if every rank mapped every peer with the same settings.
  const std::string agree = absl::StrCat(prefix, "/peer-ok/");
  RETURN_IF_ERROR(store.Set(absl::StrCat(agree, rank), local.ok() ? "1" : local.ToString()));
  if (!local.ok()) spdlog::warn("peer all-reduce off: rank {}: {}", rank, local.ToString());
  bool all_ok = local.ok();
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    ASSIGN_OR_RETURN(const std::string verdict, store.Get(absl::StrCat(agree, peer), timeout));
    if (verdict != "1") {
      if (all_ok) spdlog::warn("peer all-reduce off: rank {}: {}", peer, verdict);
      all_ok = false;
    }
  }
  if (!all_ok) return std::unique_ptr<PeerGroup>();
  spdlog::info("peer all-reduce on: rank {} of {}, messages up to {} bytes (one-shot up to {})",
               rank, world, b.half_bytes, one_shot_max_bytes);
  return group;
}

PeerGroup::~PeerGroup() {
  cudaDeviceSynchronize();  // no kernel of this rank still reads a peer's buffer or writes ours
  for (void* p : ipc_mapped_) cudaIpcCloseMemHandle(p);
  cudaFree(own_);
  cudaFree(buffers_.counters);
}

absl::Status PeerGroup::AllReduceBf16(void* data, int64_t count, void* stream) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    return absl::InternalError("peer all-reduce: data not 16-byte aligned");
  }
  const bool two_shot = count * 2 > one_shot_max_bytes_;
  return CudaStatus(
      LaunchPeerAllReduceBf16(buffers_, data, count, two_shot, static_cast<cudaStream_t>(stream)),
      "peer all-reduce");
}

}  // namespace xserv::parallel
