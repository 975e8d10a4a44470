#include "worker/engine/peer_loop.h"

#include <string>

#include "common/status.h"
#include "worker/engine/plan_channel.h"

namespace xserv::engine {

absl::Status RunPeerLoop(parallel::Communicator& comm, int root, DeviceStepRunner& runner,
                         PeerLoopStats* stats) {
  PeerLoopStats local;
  PeerLoopStats& s = stats != nullptr ? *stats : local;
  std::string bytes;
  PlanChannel plans(comm, root, /*max_in_flight=*/1);  // receives only
  while (true) {
    RETURN_IF_ERROR(plans.Receive(bytes));
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
