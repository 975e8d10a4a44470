// RendezvousRpcKeyValueStore against the real WorkerService Rendezvous handler (no engine, as on
// a peer rank) on 127.0.0.1, and a Gloo world of two that meets through it.
#include "worker/parallel/rendezvous_rpc_store.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/service/rendezvous_store.h"
#include "worker/service/worker_service.h"

namespace xserv::parallel {
namespace {

using std::chrono::milliseconds;

// A leader's Worker service (no engine) serving a RendezvousStore of `epoch` on a free port.
class Leader {
 public:
  explicit Leader(uint64_t epoch) : store_(epoch), service_(nullptr, &store_, {}) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~Leader() {
    store_.Shutdown();  // wakes Gets still waiting so that the server can stop
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  worker::RendezvousStore store_;
  worker::WorkerService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(RendezvousRpcStore, SetThenGetKeepsBinaryValues) {
  Leader leader(7);
  ASSERT_TRUE(leader.ok());
  RendezvousRpcKeyValueStore store(leader.target(), 7);
  const std::string value("a\0b\xff", 4);
  ASSERT_TRUE(store.Set("tp/0", value).ok());
  absl::StatusOr<std::string> got = store.Get("tp/0", milliseconds(2000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
}

TEST(RendezvousRpcStore, GetWaitsForALaterSet) {
  Leader leader(7);
  ASSERT_TRUE(leader.ok());
  RendezvousRpcKeyValueStore store(leader.target(), 7);
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(store.Set("late", "v").ok());
  });
  absl::StatusOr<std::string> got = store.Get("late", milliseconds(5000));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST(RendezvousRpcStore, MissingKeyIsDeadlineExceededOnTime) {
  Leader leader(7);
  ASSERT_TRUE(leader.ok());
  RendezvousRpcKeyValueStore store(leader.target(), 7);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> got = store.Get("never", milliseconds(300));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
}

TEST(RendezvousRpcStore, WrongEpochIsRefused) {
  Leader leader(7);
  ASSERT_TRUE(leader.ok());
  RendezvousRpcKeyValueStore stale(leader.target(), 6);
  const absl::Status set = stale.Set("k", "v");
  EXPECT_EQ(set.code(), absl::StatusCode::kFailedPrecondition) << set;
  EXPECT_NE(set.message().find("epoch 6"), std::string::npos) << set;
  EXPECT_EQ(stale.Get("k", milliseconds(1000)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RendezvousRpcStore, UnreachableLeaderTimesOut) {
  // Nothing listens on port 1; wait_for_ready keeps trying until the call's deadline.
  RendezvousRpcKeyValueStore store("127.0.0.1:1", 7, milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(store.Set("k", "v").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(store.Get("k", milliseconds(300)).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

// Each rank has its own client, as separate processes would.
std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> CreateWorld(
    const Leader& leader, std::vector<uint64_t> epochs) {
  const int world = static_cast<int>(epochs.size());
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> comms(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.world_size = world;
      options.store = std::make_shared<RendezvousRpcKeyValueStore>(leader.target(), epochs[rank]);
      options.prefix = "tp";
      options.timeout = milliseconds(1000);
      comms[rank] = CreateGlooCommunicator(options);
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

TEST(RendezvousRpcStore, GlooWorldOfTwoMeetsThroughTheLeader) {
  Leader leader(3);
  ASSERT_TRUE(leader.ok());
  auto comms = CreateWorld(leader, {3, 3});
  for (auto& comm : comms) ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<std::thread> threads;
  for (auto& comm : comms) {
    threads.emplace_back([&comm] {
      std::vector<float> data(10, static_cast<float>((*comm)->rank() + 1));
      EXPECT_TRUE((*comm)->AllReduce(data, ReduceOp::kSum).ok());
      EXPECT_EQ(data, std::vector<float>(10, 3.0f));
      std::string plan = (*comm)->rank() == 0 ? "step 1" : "";
      EXPECT_TRUE(BroadcastString(**comm, plan, 0).ok());
      EXPECT_EQ(plan, "step 1");
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(RendezvousRpcStore, GlooRankOfAStaleEpochFailsClearly) {
  Leader leader(3);
  ASSERT_TRUE(leader.ok());
  auto comms = CreateWorld(leader, {3, 2});
  // The stale rank is refused at once; rank 0 then waits for it in vain.
  EXPECT_EQ(comms[1].status().code(), absl::StatusCode::kFailedPrecondition) << comms[1].status();
  EXPECT_NE(comms[1].status().message().find("epoch 2"), std::string::npos) << comms[1].status();
  EXPECT_EQ(comms[0].status().code(), absl::StatusCode::kDeadlineExceeded) << comms[0].status();
}

}  // namespace
}  // namespace xserv::parallel
