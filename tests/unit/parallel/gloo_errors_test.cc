// Failure paths of the Gloo communicator (bounded by short timeouts, never hangs) and the trivial
// single-rank communicator.
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/parallel/test_util.h"

namespace xserv::parallel {
namespace {

using std::chrono::milliseconds;
using testing::RunRanks;

GlooOptions Options(int rank, int world_size, std::shared_ptr<KeyValueStore> store,
                    milliseconds timeout) {
  GlooOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.store = std::move(store);
  options.prefix = "tp";
  options.timeout = timeout;
  return options;
}

TEST(GlooErrors, RankThatNeverJoinsFailsCreationWithinTheTimeout) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  constexpr milliseconds kTimeout(500);
  std::vector<absl::Status> results(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {  // rank 2 of 3 never starts
    threads.emplace_back([&, rank] {
      results[rank] = CreateGlooCommunicator(Options(rank, 3, store, kTimeout)).status();
    });
  }
  for (std::thread& t : threads) t.join();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  for (const absl::Status& status : results) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_NE(status.message().find("tp/2"), std::string::npos) << status;  // names the missing key
  }
  EXPECT_LT(elapsed, 4 * kTimeout);
}

TEST(GlooErrors, BadOptionsAreInvalidArgument) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  EXPECT_EQ(CreateGlooCommunicator(Options(2, 2, store, milliseconds(100))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(Options(0, 2, nullptr, milliseconds(100))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(Options(0, 2, store, milliseconds(0))).status().code(),
            absl::StatusCode::kInvalidArgument);
  GlooOptions no_prefix = Options(0, 2, store, milliseconds(100));
  no_prefix.prefix.clear();
  EXPECT_EQ(CreateGlooCommunicator(no_prefix).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooErrors, UnresolvableHostFailsCleanly) {
  GlooOptions options = Options(0, 1, std::make_shared<InMemoryKeyValueStore>(), milliseconds(500));
  options.interface_or_host = "no-such-host.invalid";
  absl::Status status = CreateGlooCommunicator(options).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("no-such-host.invalid"), std::string::npos) << status;
}

TEST(GlooErrors, CallerMistakesAreInvalidArgumentAndLeaveTheCommunicatorUsable) {
  RunRanks(2, [](Communicator& comm) {
    std::vector<float> send(3), wrong(5);
    EXPECT_EQ(comm.AllGather(send, wrong).code(), absl::StatusCode::kInvalidArgument);
    std::vector<float> overlapping(6);
    EXPECT_EQ(comm.AllGather(std::span<const float>(overlapping).subspan(1, 3), overlapping).code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<std::byte> bytes(4);
    EXPECT_EQ(comm.Broadcast(bytes, 2).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.Send(bytes, comm.rank(), 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.Recv(bytes, 1 - comm.rank(), -1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(comm.Barrier().ok());
  });
}

// A Recv nobody answers times out; after that the communicator refuses every call.
TEST(GlooErrors, TimeoutBreaksTheCommunicator) {
  RunRanks(
      2,
      [](Communicator& comm) {
        if (comm.rank() != 1) return;
        std::vector<std::byte> data(16);
        const absl::Status status = comm.Recv(data, 0, 5);
        EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
        EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
      },
      nullptr, milliseconds(300));
}

TEST(GlooWorldOfOne, CollectivesWork) {
  RunRanks(1, [](Communicator& comm) {
    std::vector<float> data = {1.5f, -2.0f};
    ASSERT_TRUE(comm.AllReduce(data, ReduceOp::kSum).ok());
    EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
    std::vector<float> recv(2);
    ASSERT_TRUE(comm.AllGather(data, recv).ok());
    EXPECT_EQ(recv, data);
    std::string s = "plan";
    ASSERT_TRUE(BroadcastString(comm, s, 0).ok());
    EXPECT_EQ(s, "plan");
    EXPECT_TRUE(comm.Barrier().ok());
  });
}

TEST(SingleRankCommunicator, CollectivesAreLocalAndPointToPointFails) {
  SingleRankCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  std::vector<float> data = {3.0f, 4.0f};
  EXPECT_TRUE(comm.AllReduce(data, ReduceOp::kMax).ok());
  EXPECT_EQ(data, (std::vector<float>{3.0f, 4.0f}));
  std::vector<float> recv(2);
  EXPECT_TRUE(comm.AllGather(data, recv).ok());
  EXPECT_EQ(recv, data);
  std::vector<float> short_recv(1);
  EXPECT_EQ(comm.AllGather(data, short_recv).code(), absl::StatusCode::kInvalidArgument);
  std::string s(1 << 20, 'x');
  EXPECT_TRUE(BroadcastString(comm, s, 0).ok());
  EXPECT_EQ(s.size(), 1u << 20);
  std::vector<std::byte> bytes(4);
  EXPECT_FALSE(comm.Send(bytes, 0, 0).ok());
  EXPECT_FALSE(comm.Recv(bytes, 0, 0).ok());
  EXPECT_TRUE(comm.Barrier().ok());
}

}  // namespace
}  // namespace xserv::parallel
