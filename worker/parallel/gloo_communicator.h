// Gloo implementation of Communicator: collectives over TCP between the CPU ranks of a replica.
//
// CreateGlooCommunicator blocks until every rank of the world has called it with the same store
// and prefix (each rank publishes its TCP addresses under the prefix, then connects to every
// peer), or fails after `timeout`. Call it from the thread that will own the communicator; see
// communicator.h for the threading and error contract. Gloo headers stay out of this header.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/kv_store.h"

namespace xserv::parallel {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Where this rank listens for its peers: an IP address or host name, or the name of a network
  // interface ("eth0") whose address to use. Peers connect to the address published in `store`.
  std::string interface_or_host = "127.0.0.1";
  std::shared_ptr<KeyValueStore> store;
  // Namespace of this communicator's keys in `store` ("tp", "pp-0-1"); must not be empty. Keys
  // are never deleted, so a prefix serves one communicator per store (per replica epoch).
  std::string prefix;
  // Bounds the rendezvous and, afterwards, each operation.
  std::chrono::milliseconds timeout{30000};
};

// DeadlineExceeded when a peer does not show up (or answer) within the timeout, Unavailable for
// other connection failures, InvalidArgument for bad options.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options);

}  // namespace xserv::parallel
