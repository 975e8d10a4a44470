#include "worker/engine/plan_channel.h"

#include <span>
#include <utility>

#include "common/status.h"

namespace xserv::engine {

absl::Status PlanChannel::Send(std::string bytes) {
  const size_t peers = static_cast<size_t>(comm_.world_size() - 1);
  // Older plans than the last max_in_flight - 1 have been taken by now (the leader finished
  // them, and every rank took a plan before the next); wait for their sends and free them.
  RETURN_IF_ERROR(comm_.WaitSends(static_cast<size_t>(max_in_flight_ - 1) * 2 * peers));
  while (sent_.size() > static_cast<size_t>(max_in_flight_ - 1)) sent_.pop_front();
  Sent& plan = sent_.emplace_back(Sent{.size = bytes.size(), .bytes = std::move(bytes)});
  for (int rank = 0; rank < comm_.world_size(); ++rank) {
    if (rank == root_) continue;
    RETURN_IF_ERROR(
        comm_.StartSend(std::as_bytes(std::span<const uint64_t>(&plan.size, 1)), rank, kTag));
    RETURN_IF_ERROR(comm_.StartSend(std::as_bytes(std::span<const char>(plan.bytes)), rank, kTag));
  }
  return absl::OkStatus();
}

absl::Status PlanChannel::Flush() {
  RETURN_IF_ERROR(comm_.WaitSends(0));
  sent_.clear();
  return absl::OkStatus();
}

absl::Status PlanChannel::Receive(std::string& bytes) {
  uint64_t size = 0;
  RETURN_IF_ERROR(comm_.Recv(std::as_writable_bytes(std::span<uint64_t>(&size, 1)), root_, kTag));
  bytes.resize(size);
  return comm_.Recv(std::as_writable_bytes(std::span<char>(bytes.data(), bytes.size())), root_,
                    kTag);
}

}  // namespace xserv::engine
