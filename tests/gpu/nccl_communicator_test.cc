// NcclCommunicator on the visible GPUs: one thread per rank (one device each), ids exchanged
// through an in-memory store, collectives on each rank's own stream. Skips below two devices.
#include "worker/parallel/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/safetensors/float_convert.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "kernels/cuda/sleep.h"
#include "worker/parallel/kv_store.h"
#include "worker/parallel/peer_group.h"

namespace xserv::parallel {
namespace {

int VisibleDevices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// body(rank, stream) on one thread per rank, each on its own device and non-blocking stream.
template <typename Body>
void OnEveryRank(int world, Body body) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&body, r] {
      cudaSetDevice(r);
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      body(r, stream);
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : ranks) t.join();
}

TEST(NcclCommunicator, AllReduceF32AndBf16AcrossDevices) {
  const int world = std::min(VisibleDevices(), 4);
  if (world < 2) GTEST_SKIP() << "needs two CUDA devices";
  auto store = std::make_shared<InMemoryKeyValueStore>();
  constexpr size_t kCount = 1 << 20;
  std::vector<std::vector<float>> f32_out(world, std::vector<float>(kCount));
  std::vector<std::vector<uint16_t>> bf16_out(world, std::vector<uint16_t>(kCount));
  std::vector<absl::Status> status(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      cudaSetDevice(r);
      cudaStream_t stream;
      cudaStreamCreate(&stream);
      auto comm = CreateNcclCommunicator(
          {.rank = r, .world_size = world, .store = store, .prefix = "t", .stream = stream});
      if (!comm.ok()) {
        status[r] = comm.status();
        return;
      }
      // Rank r contributes value i % 97 + r (exact in fp32 and, below 256, in bf16).
      std::vector<float> host(kCount);
      std::vector<uint16_t> host16(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        host[i] = static_cast<float>(i % 97 + r);
        host16[i] = safetensors::FloatToBf16(host[i]);
      }
      float* d32 = nullptr;
      uint16_t* d16 = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&d32), kCount * sizeof(float));
      cudaMalloc(reinterpret_cast<void**>(&d16), kCount * sizeof(uint16_t));
      cudaMemcpy(d32, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(d16, host16.data(), kCount * sizeof(uint16_t), cudaMemcpyHostToDevice);
      status[r] = (*comm)->AllReduceTyped(d32, kCount, ElementType::kF32, ReduceOp::kSum);
      if (status[r].ok()) {
        status[r] = (*comm)->AllReduceTyped(d16, kCount, ElementType::kBF16, ReduceOp::kSum);
      }
      if (status[r].ok()) status[r] = (*comm)->Barrier();
      cudaMemcpy(f32_out[r].data(), d32, kCount * sizeof(float), cudaMemcpyDeviceToHost);
      cudaMemcpy(bf16_out[r].data(), d16, kCount * sizeof(uint16_t), cudaMemcpyDeviceToHost);
      cudaFree(d32);
      cudaFree(d16);
      comm->reset();
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    for (size_t i = 0; i < kCount; i += 4099) {
      const float want = static_cast<float>(world * (i % 97) + world * (world - 1) / 2);
      ASSERT_EQ(f32_out[r][i], want) << "rank " << r << " f32 at " << i;
      ASSERT_EQ(safetensors::Bf16ToFloat(bf16_out[r][i]), want) << "rank " << r << " bf16 at " << i;
    }
  }
}

// The peer all-reduce (peer_all_reduce.h) through the communicator: one-shot, two-shot and the
// NCCL fallback above peer_max_bytes, called eagerly and replayed from a CUDA graph (the flags'
// call counts live on the device). The values' sums are exact in bf16 whatever the order (NCCL's
// included); PeerGroupForms below checks the rank-ordered rounding.
TEST(NcclCommunicator, PeerAllReduceMatchesTheRankOrderedSumEagerlyAndInGraphs) {
  const int world = std::min(VisibleDevices(), 4);
  if (world < 2) GTEST_SKIP() << "needs two CUDA devices";
  auto store = std::make_shared<InMemoryKeyValueStore>();
  constexpr int64_t kOneShotMax = 64 << 10, kPeerMax = 1 << 20;
  // 16 bytes; a decode row of 4096 (one-shot); 80 KB and 1 MB (two-shot, the latter with a slice
  // boundary inside a block's stride); 2 MB (NCCL).
  const std::vector<size_t> counts = {8, 4096, 40960, 524288 - 8, 1 << 20};
  // Rank r's value at i: ((i * 7 + r * 13) % 29) / 8 - 1.75, exact in bf16, and so are sums of
  // up to four of them.
  auto value = [](size_t i, int r) {
    return static_cast<float>(((i * 7 + r * 13) % 29)) / 8 - 1.75f;
  };
  auto expected = [&](size_t i) {
    float sum = value(i, 0);
    for (int r = 1; r < world; ++r) sum += value(i, r);
    return safetensors::Bf16ToFloat(safetensors::FloatToBf16(sum));
  };
  std::vector<absl::Status> status(world);
  std::vector<std::string> failures(world);
  OnEveryRank(world, [&](int r, cudaStream_t stream) {
    auto comm = CreateNcclCommunicator({.rank = r,
                                        .world_size = world,
                                        .store = store,
                                        .prefix = "p",
                                        .stream = stream,
                                        .peer_max_bytes = kPeerMax,
                                        .peer_one_shot_max_bytes = kOneShotMax});
    if (!comm.ok()) {
      status[r] = comm.status();
      return;
    }
    std::vector<uint16_t*> bufs;
    std::vector<std::vector<uint16_t>> inputs;
    for (const size_t n : counts) {
      std::vector<uint16_t> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = safetensors::FloatToBf16(value(i, r));
      uint16_t* d = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&d), n * 2);
      bufs.push_back(d);
      inputs.push_back(std::move(host));
    }
    auto reset = [&] {  // on the collectives' stream, so ordered with them
      for (size_t c = 0; c < counts.size(); ++c) {
        cudaMemcpyAsync(bufs[c], inputs[c].data(), counts[c] * 2, cudaMemcpyHostToDevice, stream);
      }
      cudaStreamSynchronize(stream);
    };
    auto run_all = [&]() -> absl::Status {
      for (size_t c = 0; c < counts.size(); ++c) {
        RETURN_IF_ERROR(
            (*comm)->AllReduceTyped(bufs[c], counts[c], ElementType::kBF16, ReduceOp::kSum));
      }
      return absl::OkStatus();
    };
    auto check = [&](const char* when) {
      cudaStreamSynchronize(stream);
      for (size_t c = 0; c < counts.size() && failures[r].empty(); ++c) {
        std::vector<uint16_t> out(counts[c]);
        cudaMemcpy(out.data(), bufs[c], counts[c] * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < counts[c]; ++i) {
          if (safetensors::Bf16ToFloat(out[i]) != expected(i)) {
            failures[r] = absl::StrCat(when, ": count ", counts[c], " element ", i, ": ",
                                       safetensors::Bf16ToFloat(out[i]), " want ", expected(i));
            break;
          }
        }
      }
    };
    for (int round = 0; round < 3 && status[r].ok(); ++round) {  // alternating halves
      reset();
      status[r] = run_all();
      check("eager");
    }
    if (!status[r].ok()) return;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    status[r] = run_all();
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess ||
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      status[r] = absl::InternalError("graph capture failed");
    }
    for (int replay = 0; replay < 5 && status[r].ok(); ++replay) {
      reset();
      cudaGraphLaunch(exec, stream);
      check("graph replay");
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    for (uint16_t* d : bufs) cudaFree(d);
    if (status[r].ok()) status[r] = (*comm)->Barrier();
    comm->reset();
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

// PeerGroup directly: the peer path must be on (two GPUs of one host), one-shot and two-shot
// must each give every rank the host's rank-ordered fp32 sum rounded once to bf16 (values over
// many exponents, so the rounding and the order matter), also while one rank lags the other by
// a sleeping kernel before each call (a fast rank's next call must not overwrite a half its peer
// still reads), across rounds that alternate the halves.
TEST(PeerGroupForms, EqualTheRankOrderedSumWithARankLagging) {
  const int world = std::min(VisibleDevices(), 4);
  if (world < 2) GTEST_SKIP() << "needs two CUDA devices";
  auto store = std::make_shared<InMemoryKeyValueStore>();
  const std::vector<int64_t> counts = {8, 4096, 40960, 262144 - 8};
  auto value = [](int64_t i, int r) {  // +-(1..2) * 2^(-8..7), bf16-exact
    const uint32_t h = static_cast<uint32_t>(i * 2654435761u + r * 40503u);
    const float mantissa = 1.0f + static_cast<float>(h % 128) / 128.0f;
    const float v = std::ldexp(mantissa, static_cast<int>((h >> 8) % 16) - 8);
    return (h >> 16) % 2 ? -v : v;
  };
  std::vector<std::string> failures(world);
  OnEveryRank(world, [&](int r, cudaStream_t stream) {
    for (const bool two_shot : {false, true}) {
      auto group = PeerGroup::Create(r, world, *store, two_shot ? "two" : "one", 1 << 20,
                                     two_shot ? 0 : 1 << 20, std::chrono::seconds(60));
      if (!group.ok() || *group == nullptr) {
        failures[r] = group.ok() ? "the peer path is off" : group.status().ToString();
        return;
      }
      for (int round = 0; round < 4 && failures[r].empty(); ++round) {
        for (const int64_t n : counts) {
          std::vector<uint16_t> host(n);
          for (int64_t i = 0; i < n; ++i) {
            host[i] = safetensors::FloatToBf16(value(i + round, r));
          }
          uint16_t* d = nullptr;
          cudaMalloc(reinterpret_cast<void**>(&d), n * 2);
          cudaMemcpyAsync(d, host.data(), n * 2, cudaMemcpyHostToDevice, stream);
          // Rank 1 lags by 300 us in odd rounds.
          if (r == 1 && round % 2 == 1) kernels::cuda::LaunchSleep(300, stream);
          const absl::Status s = (*group)->AllReduceBf16(d, n, stream);
          cudaMemcpyAsync(host.data(), d, n * 2, cudaMemcpyDeviceToHost, stream);
          cudaStreamSynchronize(stream);
          cudaFree(d);
          if (!s.ok()) {
            failures[r] = s.ToString();
            break;
          }
          for (int64_t i = 0; i < n; ++i) {
            float sum = value(i + round, 0);
            for (int p = 1; p < world; ++p) sum += value(i + round, p);
            const uint16_t want = safetensors::FloatToBf16(sum);
            if (host[i] != want) {
              failures[r] =
                  absl::StrCat(two_shot ? "two" : "one", "-shot, round ", round, ", count ", n,
                               ", element ", i, ": bits ", host[i], " want ", want);
              break;
            }
          }
        }
      }
      group->reset();
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// Ranks that disagree on the settings all keep NCCL (no group), none is left alone on the peer
// path.
TEST(PeerGroupForms, RanksWithOtherSettingsAllFallBack) {
  const int world = std::min(VisibleDevices(), 4);
  if (world < 2) GTEST_SKIP() << "needs two CUDA devices";
  auto store = std::make_shared<InMemoryKeyValueStore>();
  std::vector<int> groups(world, -1);
  OnEveryRank(world, [&](int r, cudaStream_t) {
    auto group = PeerGroup::Create(r, world, *store, "mismatch", 1 << 20, r == 0 ? 4096 : 8192,
                                   std::chrono::seconds(60));
    groups[r] = group.ok() ? (*group != nullptr ? 1 : 0) : -1;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(groups[r], 0) << "rank " << r;
}

}  // namespace
}  // namespace xserv::parallel
