#include "worker/parallel/communicator.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::parallel {

absl::Status BroadcastString(Communicator& comm, std::string& value, int root) {
  // Fixed-width size so every rank posts the same 8-byte first broadcast.
  uint64_t size = comm.rank() == root ? value.size() : 0;
  RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<uint64_t>(&size, 1)), root));
  if (comm.rank() != root) value.resize(size);
  if (size == 0) return absl::OkStatus();
  return comm.Broadcast(std::as_writable_bytes(std::span<char>(value.data(), value.size())), root);
}

absl::Status Communicator::AllReduceTyped(void* data, size_t count, ElementType type,
                                          ReduceOp op) {
  if (type != ElementType::kF32) {
    return absl::UnimplementedError("this communicator all-reduces f32 only");
  }
  return AllReduce(std::span<float>(static_cast<float*>(data), count), op);
}

absl::Status SingleRankCommunicator::AllReduce(std::span<float> data, ReduceOp op) {
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::AllGather(std::span<const float> send, std::span<float> recv) {
  if (recv.size() != send.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllGather: recv has ", recv.size(), " elements, expected ", send.size()));
  }
  if (send.data() != recv.data()) std::copy(send.begin(), send.end(), recv.begin());
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::Broadcast(std::span<std::byte> data, int root) {
  if (root != 0) return absl::InvalidArgumentError(absl::StrCat("Broadcast: bad root ", root));
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::Send(std::span<const std::byte> data, int dst, int tag) {
  return absl::InvalidArgumentError("Send: a single-rank communicator has no peer");
}

absl::Status SingleRankCommunicator::Recv(std::span<std::byte> data, int src, int tag) {
  return absl::InvalidArgumentError("Recv: a single-rank communicator has no peer");
}

absl::Status SingleRankCommunicator::Barrier() { return absl::OkStatus(); }

}  // namespace xserv::parallel
