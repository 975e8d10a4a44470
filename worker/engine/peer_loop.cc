#include "worker/engine/peer_loop.h"

#include <string>

#include "common/status.h"

namespace xserv::engine {

absl::Status RunPeerLoop(parallel::Communicator& comm, int root, DeviceStepRunner& runner,
                         PeerLoopStats* stats) {
  PeerLoopStats local;
  PeerLoopStats& s = stats != nullptr ? *stats : local;
  std::string bytes;
  while (true) {
    RETURN_IF_ERROR(parallel::BroadcastString(comm, bytes, root));
    ASSIGN_OR_RETURN(DeviceStep step, ParseDeviceStep(bytes));
    switch (step.kind) {
      case DeviceStep::Kind::kStop:
        return runner.Finish();
      case DeviceStep::Kind::kIdle:
        ++s.heartbeats;
        continue;
      case DeviceStep::Kind::kRun:
        RETURN_IF_ERROR(runner.Run(step).status());
        ++s.steps;
        break;
    }
  }
}

}  // namespace xserv::engine
