// PeerGroup: sets up the peer all-reduce (peer_all_reduce.h) for the ranks of one group: each
// rank allocates its buffer, publishes a CUDA IPC handle (with its host's boot id, a per-process
// nonce, its device and its settings) in the KeyValueStore, and maps every peer's buffer: through
// cudaIpcOpenMemHandle across processes of one host, or directly with peer access enabled when
// the ranks share a process (tests run ranks as threads). The ranks then agree: if any rank could
// not map every peer (another host, no peer access) or the ranks' settings differ, every rank
// gets no group and keeps NCCL, so no rank waits in a collective the others skip.
// Not thread-safe; owned by the NCCL communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/parallel/kv_store.h"
#include "worker/parallel/peer_all_reduce.h"

namespace xserv::parallel {

class PeerGroup {
 public:
  // Null (and OK) when the ranks agreed not to use peer buffers; an error when the store failed.
  // `max_bytes`: the largest message (rounded up to a multiple of 16 * world); messages of at
  // most `one_shot_max_bytes` take the one-shot form, larger ones two-shot. Both must be the
  // same on every rank (checked: otherwise no group).
  static absl::StatusOr<std::unique_ptr<PeerGroup>> Create(int rank, int world,
                                                           KeyValueStore& store,
                                                           const std::string& prefix,
                                                           int64_t max_bytes,
                                                           int64_t one_shot_max_bytes,
                                                           std::chrono::milliseconds timeout);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  int64_t max_bytes() const { return buffers_.half_bytes; }
  // In place on `count` bf16 values at `data` (count * 2 a multiple of 16, at most max_bytes):
  // the caller decides from the count alone, the same on every rank. Misaligned data is an error
  // rather than a silent NCCL fallback, which the other ranks would not take.
  absl::Status AllReduceBf16(void* data, int64_t count, void* stream);

 private:
  PeerGroup() = default;

  PeerBuffers buffers_;
  int64_t one_shot_max_bytes_ = 0;
  void* own_ = nullptr;                 // buffers_.buffers[rank], from cudaMalloc
  std::vector<void*> ipc_mapped_;       // peers' buffers opened through IPC
};

}  // namespace xserv::parallel
