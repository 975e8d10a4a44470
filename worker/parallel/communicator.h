// Communicator: the collectives and point-to-point calls the ranks of one replica use for tensor
// parallelism (all-reduce / all-gather of activations), pipeline parallelism (P2P hand-off of
// hidden states) and the leader's per-step plan broadcast. Implementations: Gloo over TCP for
// the CPU backend (gloo_communicator.h), NCCL for CUDA (later), and SingleRankCommunicator for
// TP=1 / PP=1 code paths so callers need no special case.
//
// Ownership and threading: a communicator is owned by the one thread that drives the forward pass
// (the engine loop on the leader, the step loop on a peer) and is NOT thread-safe. Every rank must
// issue the same collectives in the same order with the same sizes; a mismatch is a bug that
// shows up as a timeout. Any error leaves the communicator broken (later calls fail at once):
// the worker must exit and the supervisor restarts the replica (STYLE.md rule 14).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "absl/status/status.h"

namespace xserv::parallel {

enum class ReduceOp { kSum, kMax };

// Element types a typed all-reduce may carry (the activations of the two backends).
enum class ElementType { kF32, kBF16 };
// Where a communicator's buffers live: host memory (Gloo) or the current CUDA device (NCCL).
enum class MemoryKind { kHost, kDevice };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual MemoryKind memory() const { return MemoryKind::kHost; }

  // In place on `count` elements of `type` at `data` (memory of this communicator's kind). The
  // default takes kF32 through AllReduce below and refuses other types.
  virtual absl::Status AllReduceTyped(void* data, size_t count, ElementType type, ReduceOp op);

  // In place on contiguous memory: host memory for the CPU backend, device memory for NCCL.
  virtual absl::Status AllReduce(std::span<float> data, ReduceOp op) = 0;
  // Each rank contributes `send` (same size on all ranks); `recv` (world_size * send.size())
  // receives every contribution in rank order. `send` may be recv's own slot (in place) but must
  // not overlap recv otherwise.
  virtual absl::Status AllGather(std::span<const float> send, std::span<float> recv) = 0;
  // Bytes from `root` to every rank, in place; all ranks pass the same size. For payloads whose
  // size only the root knows, use BroadcastString below.
  virtual absl::Status Broadcast(std::span<std::byte> data, int root) = 0;
  // Point-to-point. A Send may block until `dst` has posted the matching Recv (Gloo's TCP
  // transport does), so two ranks that both Send before they Recv deadlock: order the calls
  // (e.g. even ranks send first). Messages with the same (peer, tag) arrive in order; `tag` >= 0.
  // For float tensors, pass std::as_bytes(span) / std::as_writable_bytes(span).
  virtual absl::Status Send(std::span<const std::byte> data, int dst, int tag) = 0;
  virtual absl::Status Recv(std::span<std::byte> data, int src, int tag) = 0;
  // A Send that returns at once (pipeline stages hand their output on and start the next step
  // while the next stage is still busy). `data` must stay valid and unchanged until WaitSends()
  // says it was delivered. The default sends synchronously.
  virtual absl::Status StartSend(std::span<const std::byte> data, int dst, int tag) {
    return Send(data, dst, tag);
  }
  // Waits, oldest first, until at most `max_pending` StartSends are still undelivered.
  virtual absl::Status WaitSends(size_t max_pending = 0) { return absl::OkStatus(); }
  virtual absl::Status Barrier() = 0;
};

// Broadcasts a byte string whose length only `root` knows: the size first, then the payload.
// On non-root ranks `value` is replaced.
absl::Status BroadcastString(Communicator& comm, std::string& value, int root);

// World of one: collectives are no-ops (AllGather copies), Send/Recv have no peer and fail.
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceTyped(void*, size_t, ElementType, ReduceOp) override {
    return absl::OkStatus();
  }
  absl::Status AllReduce(std::span<float> data, ReduceOp op) override;
  absl::Status AllGather(std::span<const float> send, std::span<float> recv) override;
  absl::Status Broadcast(std::span<std::byte> data, int root) override;
  absl::Status Send(std::span<const std::byte> data, int dst, int tag) override;
  absl::Status Recv(std::span<std::byte> data, int src, int tag) override;
  absl::Status Barrier() override;
};

}  // namespace xserv::parallel
