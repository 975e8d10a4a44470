#include <cmath>
#include <cstdio>
#include <fstream>

#include "deploy/supervisor/backoff.h"
#include "deploy/supervisor/topology.h"
#include "gtest/gtest.h"

namespace xserv::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RestartBackoff, DoublesUpToTheCapAndResetsAfterStableUptime) {
  RestartBackoff b(seconds(1), seconds(10), seconds(60));
  EXPECT_EQ(b.OnFailure(seconds(1)), seconds(1));
  EXPECT_EQ(b.OnFailure(seconds(1)), seconds(2));
  EXPECT_EQ(b.OnFailure(seconds(1)), seconds(4));
  EXPECT_EQ(b.OnFailure(seconds(1)), seconds(8));
  EXPECT_EQ(b.OnFailure(seconds(1)), seconds(10));
  EXPECT_EQ(b.OnFailure(seconds(1)), seconds(10));
  EXPECT_EQ(b.OnFailure(seconds(120)), seconds(1));  // it ran long enough: back to the start
}

TEST(Topology, PortsAndLeaders) {
  Topology t;
  t.model_dir = "/m";
  t.replicas = 3;
  t.worker_base_port = 6000;
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_EQ(t.LeaderAddresses(),
            (std::vector<std::string>{"127.0.0.1:6000", "127.0.0.1:6001", "127.0.0.1:6002"}));
}

TEST(Topology, ValidationNamesTheProblem) {
  Topology t;
  EXPECT_NE(t.Validate().message().find("--model"), std::string::npos);
  t.model_dir = "/m";
  t.backend = "tpu";
  EXPECT_FALSE(t.Validate().ok());
  t.backend = "cpu";
  t.tp = 2;
  t.pp = 3;
  EXPECT_TRUE(t.Validate().ok());
  t.worker_base_port = 7000;
  EXPECT_EQ(t.LeaderAddresses(), (std::vector<std::string>{"127.0.0.1:7004"}));  // tp 0, stage 2
  t.tp = 1;
  t.pp = 1;
  t.replicas = 0;
  EXPECT_FALSE(t.Validate().ok());
  t.replicas = 1;
  t.backend = "cuda";
  t.devices = {0, 1};
  EXPECT_NE(t.Validate().message().find("--devices"), std::string::npos);
  // One process per GPU: the same ordinal twice is refused.
  t.tp = 2;
  EXPECT_TRUE(t.Validate().ok());
  t.devices = {1, 1};
  EXPECT_NE(t.Validate().message().find("twice"), std::string::npos);
  // Rank counts past an int's range are refused, not wrapped (65536 x 65536 was 0 workers).
  t.devices.clear();
  t.tp = 65536;
  t.pp = 65536;
  EXPECT_NE(t.Validate().message().find("at most 65535"), std::string::npos);
  t.tp = 46341;
  t.pp = 46341;
  EXPECT_FALSE(t.Validate().ok());
  t.tp = 1;
  t.pp = 1;
  ASSERT_TRUE(t.Validate().ok());
  // NaN compares false both ways: it must fail the range checks, not slip past them.
  t.grace_period_s = std::nan("");
  EXPECT_NE(t.Validate().message().find("--grace-period-s"), std::string::npos);
  t.grace_period_s = 35;
  t.unhealthy_restart_s = std::nan("");
  EXPECT_NE(t.Validate().message().find("--unhealthy-restart-s"), std::string::npos);
  t.unhealthy_restart_s = 30;
  t.max_start_failures = -1;
  EXPECT_NE(t.Validate().message().find("--max-start-failures"), std::string::npos);
  t.max_start_failures = 0;  // never give up
  EXPECT_TRUE(t.Validate().ok());
}

TEST(Topology, LoadsJsonAndRejectsUnknownKeys) {
  const std::string path = testing::TempDir() + "/topology.json";
  std::ofstream(path) << R"({"model": "/models/q", "replicas": 2, "http_port": 9000,
                            "worker_host": "0.0.0.0", "worker_args": ["--threads", "1"]})";
  auto t = LoadTopologyFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->worker_host, "0.0.0.0");
  EXPECT_EQ(Topology{}.worker_host, "127.0.0.1");  // workers listen on loopback by default
  EXPECT_EQ(t->model_dir, "/models/q");
  EXPECT_EQ(t->replicas, 2);
  EXPECT_EQ(t->http_port, 9000);
  EXPECT_EQ(t->worker_args, (std::vector<std::string>{"--threads", "1"}));
  std::ofstream(path) << R"({"model": "/m", "replica": 2})";
  EXPECT_NE(LoadTopologyFile(path).status().message().find("replica"), std::string::npos);
  std::ofstream(path) << R"({"model": 5})";
  EXPECT_FALSE(LoadTopologyFile(path).ok());
  std::ofstream(path) << "not json";
  EXPECT_FALSE(LoadTopologyFile(path).ok());
  EXPECT_FALSE(LoadTopologyFile(path + ".missing").ok());
}

}  // namespace
}  // namespace xserv::supervisor
