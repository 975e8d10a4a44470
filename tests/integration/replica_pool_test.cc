// ReplicaPool against two real fake-worker processes: readiness, least-loaded selection, prefix
// affinity (a shared prompt prefix keeps its replica while the load difference stays within the
// slack), exclusion, and ejection when a replica dies.
#include <thread>

#include "gtest/gtest.h"
#include "router/routing/replica_pool.h"
#include "tests/integration/process.h"

namespace xserv::testing {
namespace {

using router::ReplicaLease;
using router::ReplicaPool;
using router::ReplicaPoolOptions;

std::vector<uint32_t> Prompt(uint32_t seed, size_t n = 64) {
  std::vector<uint32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = seed * 1000 + static_cast<uint32_t>(i);
  return p;
}

TEST(ReplicaPool, LoadAffinityExclusionAndEjection) {
  ChildProcess a, b;
  ASSERT_TRUE(a.StartServer("xserv-fake-worker", {}));
  ASSERT_TRUE(b.StartServer("xserv-fake-worker", {}));
  ReplicaPool pool(ReplicaPoolOptions{.addresses = {a.address(), b.address()},
                                      .poll_interval = std::chrono::milliseconds(50),
                                      .affinity_slack = 2});
  pool.Start();
  ASSERT_TRUE(pool.AnyReady());
  ASSERT_TRUE(pool.Info().has_value());

  // Affinity: the same prefix goes to the same replica while loads are equal...
  auto first = pool.Acquire(Prompt(1));
  ASSERT_NE(first, nullptr);
  const int home = first->index();
  first.reset();
  for (int i = 0; i < 5; ++i) {
    auto again = pool.Acquire(Prompt(1));
    EXPECT_EQ(again->index(), home);
  }
  // ... and while its extra load stays within the slack (2): leases held on `home` make it
  // busier, 0 / 1 / 2 in flight against 0 on the other replica ...
  std::vector<std::unique_ptr<ReplicaLease>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(pool.Acquire(Prompt(1)));
    EXPECT_EQ(held.back()->index(), home) << i;
  }
  // ... but at 3 against 0 the least-loaded replica wins.
  auto spill = pool.Acquire(Prompt(1));
  EXPECT_NE(spill->index(), home);
  held.clear();
  spill.reset();

  // A short prompt (under one block) has no affinity: least loaded.
  auto busy = pool.Acquire(Prompt(2, 8));
  auto other = pool.Acquire(Prompt(3, 8));
  EXPECT_NE(busy->index(), other->index());
  busy.reset();
  other.reset();

  // Exclusion (retry on another replica).
  const std::vector<int> exclude = {home};
  auto excluded = pool.Acquire(Prompt(1), exclude);
  EXPECT_NE(excluded->index(), home);
  excluded.reset();

  // Ejection: kill one replica; after a few polls only the other is handed out.
  ChildProcess& victim = home == 0 ? a : b;
  victim.Stop(SIGKILL);
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.ProbeAll();
    if (!pool.Snapshot()[home].ready) break;
  }
  EXPECT_FALSE(pool.Snapshot()[home].ready);
  for (int i = 0; i < 5; ++i) {
    auto lease = pool.Acquire(Prompt(1));
    ASSERT_NE(lease, nullptr);
    EXPECT_NE(lease->index(), home);
  }
  pool.Stop();
}

}  // namespace
}  // namespace xserv::testing
