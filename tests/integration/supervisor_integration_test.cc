// The main job end to end: xserv-supervisor launches a worker replica and the router; requests
// are served; kill -9 of the worker gives clean errors, the replica is restarted and serves again
// (time to recovery measured); kill -9 of the router gets it restarted; SIGTERM drains in-flight
// requests and exits 0. A worker or a peer rank that hangs (SIGSTOP) gets its replica restarted.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/http_client.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"

namespace xserv::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

json Chat(int max_tokens) {
  return json{{"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"ignore_eos", true}};
}

int ReadPort(const std::string& file) {
  std::ifstream in(file);
  int port = 0;
  in >> port;
  return port;
}

TEST(Supervisor, ServesHealsAndDrains) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model, {"--grace-period-s", "20"})) << supervisor.Log();
  // The router's drain fits the grace period: 20 s less 5 for ending what is left and stopping.
  EXPECT_NE(supervisor.Log().find("--drain-timeout-s=15.000"), std::string::npos) << supervisor.Log();
  // StartServer appended "--port 0 --port-file F": the router writes its port there.
  int port = supervisor.port();
  ASSERT_EQ(Post(port, "/v1/chat/completions", Chat(8)).status, 200) << supervisor.Log();

  // kill -9 the worker: clean errors meanwhile, then the replica is back.
  std::vector<pid_t> workers = ChildrenNamed(supervisor.pid(), "xserv-worker");
  ASSERT_EQ(workers.size(), 1u);
  const auto killed_at = Clock::now();
  kill(workers[0], SIGKILL);
  int errors = 0;
  double recovery_s = -1;
  while (Clock::now() - killed_at < std::chrono::seconds(60)) {
    HttpResult r = Post(port, "/v1/chat/completions", Chat(4));
    if (r.status == 200) {
      recovery_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
      break;
    }
    ++errors;
    EXPECT_TRUE(r.status == 503 || r.status == 500) << r.status << " " << r.body;
    EXPECT_TRUE(r.Json().contains("error")) << r.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(recovery_s, 0) << supervisor.Log();
  std::cout << "worker kill -9 -> serving again after " << recovery_s << " s (" << errors
            << " requests refused meanwhile)\n";
  RecordProperty("worker_recovery_seconds", std::to_string(recovery_s));

  // kill -9 the router: the supervisor restarts it (on a new port: it was started with port 0).
  std::vector<pid_t> routers = ChildrenNamed(supervisor.pid(), "xserv-router");
  ASSERT_EQ(routers.size(), 1u);
  const std::string port_file = supervisor.log_path().substr(0, supervisor.log_path().rfind('/')) + "/port";
  std::filesystem::remove(port_file);
  kill(routers[0], SIGKILL);
  const auto router_killed = Clock::now();
  while (ReadPort(port_file) == 0 && Clock::now() - router_killed < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  port = ReadPort(port_file);
  ASSERT_GT(port, 0) << supervisor.Log();
  EXPECT_EQ(Post(port, "/v1/chat/completions", Chat(4)).status, 200);

  // SIGTERM with a request in flight: it completes, everything exits 0.
  auto in_flight = std::async(std::launch::async, [&] {
    return Post(port, "/v1/chat/completions", Chat(200));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(60)), 0) << supervisor.Log();
  HttpResult r = in_flight.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["usage"]["completion_tokens"], 200);
  EXPECT_TRUE(ChildrenNamed(supervisor.pid() > 0 ? supervisor.pid() : -supervisor.pid(),
                            "xserv-worker")
                  .empty());
}

// A process that neither exited nor became a zombie.
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t close = text.rfind(')');  // the state letter follows "(comm) "
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

// A replica whose start fails every time (a worker flag no restart can fix) is given up after
// --max-start-failures starts; with none left the supervisor stops and exits 1 rather than
// restarting it forever.
TEST(Supervisor, GivesUpAReplicaThatCannotStart) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  EXPECT_FALSE(StartSmallStack(supervisor, model,
                               {"--worker-arg=--max-model-len=100000", "--max-start-failures",
                                "2"}));
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(60)), 1) << supervisor.Log();
  const std::string log = supervisor.Log();
  EXPECT_NE(log.find("exceeds the model's context"), std::string::npos) << log;
  EXPECT_NE(log.find("failed 2 starts in a row without getting ready: giving it up"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("every replica failed to start"), std::string::npos) << log;
}

// kill -9 of the supervisor takes its worker and router along (PR_SET_PDEATHSIG): orphans would
// hold the ports and answer the probes of the supervisor started in its place.
TEST(Supervisor, ChildrenDoNotOutliveAKilledSupervisor) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model)) << supervisor.Log();
  std::vector<pid_t> children = ChildrenNamed(supervisor.pid(), "xserv-worker");
  const std::vector<pid_t> routers = ChildrenNamed(supervisor.pid(), "xserv-router");
  children.insert(children.end(), routers.begin(), routers.end());
  ASSERT_EQ(children.size(), 2u) << supervisor.Log();
  EXPECT_EQ(supervisor.Stop(SIGKILL, std::chrono::seconds(10)), 128 + SIGKILL);
  const auto killed = Clock::now();
  auto any_alive = [&] {
    return std::any_of(children.begin(), children.end(), [](pid_t p) { return Alive(p); });
  };
  while (any_alive() && Clock::now() - killed < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(any_alive()) << supervisor.Log();
}

// A worker that stops answering (SIGSTOP: a hung process, as a rank stuck in a collective looks
// to its probes) is killed and its replica restarted once it has been unhealthy for
// --unhealthy-restart-s; requests are served again afterwards.
TEST(Supervisor, RestartsAReplicaThatStopsAnswering) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model, {"--unhealthy-restart-s", "2"}))
      << supervisor.Log();
  const int port = supervisor.port();
  ASSERT_EQ(Post(port, "/v1/chat/completions", Chat(4)).status, 200) << supervisor.Log();
  std::vector<pid_t> workers = ChildrenNamed(supervisor.pid(), "xserv-worker");
  ASSERT_EQ(workers.size(), 1u);
  const pid_t hung = workers[0];
  const auto stopped_at = Clock::now();
  ASSERT_EQ(kill(hung, SIGSTOP), 0);
  double recovery_s = -1;
  while (Clock::now() - stopped_at < std::chrono::seconds(90)) {
    std::vector<pid_t> now = ChildrenNamed(supervisor.pid(), "xserv-worker");
    if (now.size() == 1 && now[0] != hung &&
        Post(port, "/v1/chat/completions", Chat(4)).status == 200) {
      recovery_s = std::chrono::duration<double>(Clock::now() - stopped_at).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_GT(recovery_s, 0) << supervisor.Log();
  EXPECT_GE(recovery_s, 2.0) << "restarted before the replica was unhealthy for 2 s";
  EXPECT_NE(supervisor.Log().find("does not answer health probes"), std::string::npos)
      << supervisor.Log();
  EXPECT_EQ(kill(hung, 0), -1) << "the stopped worker was not killed";
  std::cout << "stopped worker -> serving again after " << recovery_s << " s\n";
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(60)), 0) << supervisor.Log();
}

// A TP=2 replica whose peer rank hangs (SIGSTOP) while a request is in flight: the leader stays
// up but its step waits in the all-reduce, so after --step-timeout-s its health turns FAILED and
// the supervisor restarts the whole replica; requests are served again afterwards.
TEST(Supervisor, RestartsAReplicaWhosePeerRankHangs) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model,
                              {"--tp", "2", "--unhealthy-restart-s", "1",
                               "--worker-arg=--step-timeout-s", "--worker-arg=1"}))
      << supervisor.Log();
  const int port = supervisor.port();
  ASSERT_EQ(Post(port, "/v1/chat/completions", Chat(4)).status, 200) << supervisor.Log();
  const std::vector<pid_t> before = ChildrenNamed(supervisor.pid(), "xserv-worker");
  ASSERT_EQ(before.size(), 2u);
  pid_t peer = -1;  // the rank started with --tp-rank 1
  for (pid_t pid : before) {
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
    const std::string args((std::istreambuf_iterator<char>(cmdline)), {});
    if (args.find(std::string("--tp-rank\0" "1", 11)) != std::string::npos) peer = pid;
  }
  ASSERT_GT(peer, 0);
  const auto stopped_at = Clock::now();
  ASSERT_EQ(kill(peer, SIGSTOP), 0);
  // The step this request starts cannot finish: it ends with an error once the replica dies.
  auto stuck = std::async(std::launch::async, [&] {
    return Post(port, "/v1/chat/completions", Chat(4));
  });
  double recovery_s = -1;
  while (Clock::now() - stopped_at < std::chrono::seconds(120)) {
    std::vector<pid_t> now = ChildrenNamed(supervisor.pid(), "xserv-worker");
    const bool replaced = now.size() == 2 && std::find(now.begin(), now.end(), peer) == now.end();
    if (replaced && Post(port, "/v1/chat/completions", Chat(4)).status == 200) {
      recovery_s = std::chrono::duration<double>(Clock::now() - stopped_at).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_GT(recovery_s, 0) << supervisor.Log();
  EXPECT_NE(supervisor.Log().find("probably hung"), std::string::npos) << supervisor.Log();
  const HttpResult failed = stuck.get();
  EXPECT_NE(failed.status, 200) << failed.body;
  EXPECT_TRUE(failed.Json().contains("error")) << failed.body;
  std::cout << "hung peer rank -> serving again after " << recovery_s << " s\n";
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(60)), 0) << supervisor.Log();
}

}  // namespace
}  // namespace xserv::testing
