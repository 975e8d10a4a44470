// Gloo collectives and point-to-point between 2, 3 and 4 ranks (threads) over loopback TCP.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/parallel/test_util.h"

namespace xserv::parallel {
namespace {

using testing::RunRanks;

class GlooWorldTest : public ::testing::TestWithParam<int> {
 protected:
  int world() const { return GetParam(); }
};

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Integer-valued floats below 2^24 add exactly in any order, so the check is exact. 1M + 3
// elements spans several of Gloo's 1 MiB segments with a ragged end.
TEST_P(GlooWorldTest, AllReduceSumIsExactOnIntegers) {
  constexpr size_t kN = (1 << 20) + 3;
  RunRanks(world(), [&](Communicator& comm) {
    std::vector<float> data(kN);
    for (size_t i = 0; i < kN; ++i) data[i] = static_cast<float>(comm.rank() * 1000 + i % 1000);
    ASSERT_TRUE(comm.AllReduce(data, ReduceOp::kSum).ok());
    const int w = comm.world_size();
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_EQ(data[i], static_cast<float>(1000 * w * (w - 1) / 2 + w * (i % 1000))) << i;
    }
  });
}

TEST_P(GlooWorldTest, AllReduceSumOfRandomFloatsWithinTolerance) {
  constexpr size_t kN = 4099;
  RunRanks(world(), [&](Communicator& comm) {
    std::vector<float> data = RandomFloats(kN, comm.rank());
    ASSERT_TRUE(comm.AllReduce(data, ReduceOp::kSum).ok());
    std::vector<double> expected(kN, 0.0);
    for (int r = 0; r < comm.world_size(); ++r) {
      const std::vector<float> v = RandomFloats(kN, r);
      for (size_t i = 0; i < kN; ++i) expected[i] += v[i];
    }
    for (size_t i = 0; i < kN; ++i) ASSERT_NEAR(data[i], expected[i], 1e-5) << i;
  });
}

TEST_P(GlooWorldTest, AllReduceMaxIsExact) {
  constexpr size_t kN = 1000;
  RunRanks(world(), [&](Communicator& comm) {
    std::vector<float> data = RandomFloats(kN, 100 + comm.rank());
    ASSERT_TRUE(comm.AllReduce(data, ReduceOp::kMax).ok());
    std::vector<float> expected = RandomFloats(kN, 100);
    for (int r = 1; r < comm.world_size(); ++r) {
      const std::vector<float> v = RandomFloats(kN, 100 + r);
      for (size_t i = 0; i < kN; ++i) expected[i] = std::max(expected[i], v[i]);
    }
    EXPECT_EQ(data, expected);
  });
}

TEST_P(GlooWorldTest, AllGatherInRankOrderAndInPlace) {
  constexpr size_t kN = 5;
  RunRanks(world(), [&](Communicator& comm) {
    const int w = comm.world_size();
    std::vector<float> send(kN);
    for (size_t i = 0; i < kN; ++i) send[i] = static_cast<float>(comm.rank() * 10 + i);
    std::vector<float> expected;
    for (int r = 0; r < w; ++r) {
      for (size_t i = 0; i < kN; ++i) expected.push_back(static_cast<float>(r * 10 + i));
    }
    std::vector<float> recv(kN * w, -1.0f);
    ASSERT_TRUE(comm.AllGather(send, recv).ok());
    EXPECT_EQ(recv, expected);

    // In place: this rank's contribution already sits in its slot of the output.
    std::vector<float> buf(kN * w, -1.0f);
    std::copy(send.begin(), send.end(), buf.begin() + kN * comm.rank());
    ASSERT_TRUE(
        comm.AllGather(std::span<const float>(buf).subspan(kN * comm.rank(), kN), buf).ok());
    EXPECT_EQ(buf, expected);
  });
}

TEST_P(GlooWorldTest, BroadcastFromLastRank) {
  RunRanks(world(), [&](Communicator& comm) {
    const int root = comm.world_size() - 1;
    std::vector<std::byte> data(777, std::byte{0});
    if (comm.rank() == root) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7);
    }
    ASSERT_TRUE(comm.Broadcast(data, root).ok());
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<std::byte>(i * 7));
  });
}

TEST_P(GlooWorldTest, BroadcastStringOfVaryingLengths) {
  const std::vector<size_t> lengths = {0, 1, 7, 4096, 1 << 20, 0, 3};
  RunRanks(world(), [&](Communicator& comm) {
    const int root = 1 % comm.world_size();
    for (size_t len : lengths) {
      std::string expected(len, '\0');
      for (size_t i = 0; i < len; ++i) expected[i] = static_cast<char>('a' + (i * 31 + len) % 26);
      std::string value = comm.rank() == root ? expected : std::string("stale contents");
      ASSERT_TRUE(BroadcastString(comm, value, root).ok()) << len;
      ASSERT_EQ(value, expected) << len;
    }
  });
}

// Send may wait for the matching Recv, so even ranks send first and odd ranks receive first.
absl::Status RingStep(Communicator& comm, std::span<const std::byte> out, std::span<std::byte> in,
                      int tag) {
  const int w = comm.world_size();
  const int next = (comm.rank() + 1) % w;
  const int prev = (comm.rank() + w - 1) % w;
  if (comm.rank() % 2 == 0) {
    if (absl::Status s = comm.Send(out, next, tag); !s.ok()) return s;
    return comm.Recv(in, prev, tag);
  }
  if (absl::Status s = comm.Recv(in, prev, tag); !s.ok()) return s;
  return comm.Send(out, next, tag);
}

TEST_P(GlooWorldTest, SendRecvRingWithTags) {
  RunRanks(world(), [&](Communicator& comm) {
    const int w = comm.world_size();
    for (int tag : {0, 7, 1 << 30}) {
      std::vector<int32_t> out(100, comm.rank() * 1000 + tag % 1000);
      std::vector<int32_t> in(100, -1);
      ASSERT_TRUE(
          RingStep(comm, std::as_bytes(std::span(out)), std::as_writable_bytes(std::span(in)), tag)
              .ok());
      const int prev = (comm.rank() + w - 1) % w;
      EXPECT_EQ(in, std::vector<int32_t>(100, prev * 1000 + tag % 1000));
    }
  });
}

// A pipeline stage's pattern: every rank starts sends to the next rank without waiting, goes on
// (here: a broadcast every rank joins, as the step plan is), and only then receives. Synchronous
// Sends would deadlock here on every rank at once.
TEST_P(GlooWorldTest, StartSendLetsEveryRankSendBeforeItReceives) {
  RunRanks(world(), [&](Communicator& comm) {
    const int w = comm.world_size();
    const int next = (comm.rank() + 1) % w;
    const int prev = (comm.rank() + w - 1) % w;
    constexpr int kSends = 3;
    std::vector<std::vector<int32_t>> out(kSends);
    for (int i = 0; i < kSends; ++i) {
      out[i].assign(1000, comm.rank() * 100 + i);
      ASSERT_TRUE(comm.StartSend(std::as_bytes(std::span(out[i])), next, /*tag=*/5).ok());
    }
    std::string plan = comm.rank() == 0 ? "step" : "";
    ASSERT_TRUE(BroadcastString(comm, plan, 0).ok());
    EXPECT_EQ(plan, "step");
    for (int i = 0; i < kSends; ++i) {  // same (peer, tag): in order
      std::vector<int32_t> in(1000, -1);
      ASSERT_TRUE(comm.Recv(std::as_writable_bytes(std::span(in)), prev, 5).ok());
      EXPECT_EQ(in, std::vector<int32_t>(1000, prev * 100 + i));
      // The next rank takes message i at its own iteration i: waiting for it to have taken
      // messages 0..i must return (and leaves the later ones pending).
      ASSERT_TRUE(comm.WaitSends(static_cast<size_t>(kSends - i - 1)).ok());
    }
    ASSERT_TRUE(comm.WaitSends(0).ok());
  });
}

TEST_P(GlooWorldTest, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived{0};
  RunRanks(world(), [&](Communicator& comm) {
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    arrived.fetch_add(1);
    ASSERT_TRUE(comm.Barrier().ok());
    EXPECT_EQ(arrived.load(), comm.world_size());
  });
}

// Many consecutive operations of every kind, with sizes that change each iteration, catch slot
// or tag reuse bugs (a late message landing in the next operation's buffer).
TEST_P(GlooWorldTest, HundredMixedIterations) {
  RunRanks(world(), [&](Communicator& comm) {
    const int w = comm.world_size();
    for (int it = 0; it < 100; ++it) {
      const size_t n = 1 + (it * 37) % 300;
      std::vector<float> sum(n, static_cast<float>(comm.rank() + it));
      ASSERT_TRUE(comm.AllReduce(sum, ReduceOp::kSum).ok());
      ASSERT_EQ(sum[n - 1], static_cast<float>(w * it + w * (w - 1) / 2)) << it;

      std::vector<float> gathered(n * w);
      ASSERT_TRUE(
          comm.AllGather(std::vector<float>(n, static_cast<float>(it + comm.rank())), gathered)
              .ok());
      for (int r = 0; r < w; ++r) ASSERT_EQ(gathered[r * n], static_cast<float>(it + r)) << it;

      const int root = it % w;
      std::string plan =
          comm.rank() == root ? std::string(n, static_cast<char>('A' + it % 26)) : "";
      ASSERT_TRUE(BroadcastString(comm, plan, root).ok());
      ASSERT_EQ(plan, std::string(n, static_cast<char>('A' + it % 26))) << it;

      int32_t out = comm.rank() * 100000 + it;
      int32_t in = -1;
      ASSERT_TRUE(RingStep(comm, std::as_bytes(std::span(&out, 1)),
                           std::as_writable_bytes(std::span(&in, 1)), it % 3)
                      .ok());
      ASSERT_EQ(in, ((comm.rank() + w - 1) % w) * 100000 + it);

      if (it % 10 == 0) {
        ASSERT_TRUE(comm.Barrier().ok());
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorldTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace xserv::parallel
