// Runs the ranks of a Gloo world as threads of the test process over loopback TCP.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/kv_store.h"

namespace xserv::parallel::testing {

// Creates one communicator per rank (concurrently: creation blocks until all ranks join), then
// runs body(comm) on each rank's thread. Communicators are destroyed only after every thread has
// joined, so no rank closes its sockets while a peer still waits on it.
inline void RunRanks(int world_size, const std::function<void(Communicator&)>& body,
                     std::shared_ptr<KeyValueStore> store = nullptr,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  if (store == nullptr) store = std::make_shared<InMemoryKeyValueStore>();
  std::vector<std::unique_ptr<Communicator>> comms(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.world_size = world_size;
      options.store = store;
      options.prefix = "test";
      options.timeout = timeout;
      absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(options);
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      comms[rank] = std::move(*comm);
      body(*comms[rank]);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace xserv::parallel::testing
