// NcclCommunicator on the visible GPUs: one thread per rank (one device each), ids exchanged
// through an in-memory store, collectives on each rank's own stream. Skips below two devices.
#include <cuda_runtime_api.h>

#include <numeric>
#include <thread>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "gtest/gtest.h"
#include "worker/parallel/kv_store.h"
#include "worker/parallel/nccl_communicator.h"

namespace xserv::parallel {
namespace {

int VisibleDevices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
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

}  // namespace
}  // namespace xserv::parallel
