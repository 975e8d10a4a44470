// Proves the GPU-host round trip: our kernel, a cuBLAS GEMM and an NCCL all-reduce run on the
// device and agree with host references. Skips when no device is visible.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"

namespace {

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define ASSERT_CUBLAS(expr) ASSERT_EQ((expr), CUBLAS_STATUS_SUCCESS) << #expr
#define ASSERT_NCCL(expr) ASSERT_EQ((expr), ncclSuccess) << #expr

__global__ void Saxpy(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

class CudaSmoke : public testing::Test {
 protected:
  void SetUp() override {
    auto info = xserv::cuda::QueryRuntime();
    ASSERT_TRUE(info.ok()) << info.status();
    if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
    std::printf("%s\n", xserv::cuda::Describe(*info).c_str());
    num_devices_ = static_cast<int>(info->devices.size());
    ASSERT_CUDA(cudaSetDevice(0));
  }
  int num_devices_ = 0;
};

TEST_F(CudaSmoke, KernelMatchesHost) {
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = 0.001f * i, y[i] = 1.0f - 0.5f * i;
  float *dx = nullptr, *dy = nullptr;
  ASSERT_CUDA(cudaMalloc(&dx, n * sizeof(float)));
  ASSERT_CUDA(cudaMalloc(&dy, n * sizeof(float)));
  ASSERT_CUDA(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Saxpy<<<(n + 255) / 256, 256>>>(n, 3.0f, dx, dy);
  ASSERT_CUDA(cudaGetLastError());
  std::vector<float> out(n);
  ASSERT_CUDA(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(out[i], 3.0f * x[i] + y[i]) << i;
  cudaFree(dx);
  cudaFree(dy);
}

TEST_F(CudaSmoke, CublasSgemmMatchesHost) {
  const int m = 64, n = 48, k = 80;  // column-major C[m,n] = A[m,k] * B[k,n]
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  float *da, *db, *dc;
  ASSERT_CUDA(cudaMalloc(&da, a.size() * 4));
  ASSERT_CUDA(cudaMalloc(&db, b.size() * 4));
  ASSERT_CUDA(cudaMalloc(&dc, c.size() * 4));
  ASSERT_CUDA(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
  cublasHandle_t handle;
  ASSERT_CUBLAS(cublasCreate(&handle));
  // Pedantic math keeps the GEMM in true fp32 so a tight tolerance holds.
  ASSERT_CUBLAS(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
  const float one = 1.0f, zero = 0.0f;
  ASSERT_CUBLAS(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, db, k, &zero,
                            dc, m));
  ASSERT_CUDA(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double ref = 0;
      for (int p = 0; p < k; ++p) ref += double(a[p * m + i]) * b[j * k + p];
      ASSERT_NEAR(c[j * m + i], ref, 1e-4) << i << "," << j;
    }
  }
  cublasDestroy(handle);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST_F(CudaSmoke, NcclAllReduceOverVisibleDevices) {
  int version = 0;
  ASSERT_NCCL(ncclGetVersion(&version));
  EXPECT_GE(version, 21800);  // NCCL >= 2.18
  const int ndev = num_devices_;
  std::vector<int> devs(ndev);
  for (int i = 0; i < ndev; ++i) devs[i] = i;
  std::vector<ncclComm_t> comms(ndev);
  ASSERT_NCCL(ncclCommInitAll(comms.data(), ndev, devs.data()));
  const size_t count = 4096;
  std::vector<float*> bufs(ndev);
  std::vector<cudaStream_t> streams(ndev);
  for (int r = 0; r < ndev; ++r) {
    ASSERT_CUDA(cudaSetDevice(r));
    ASSERT_CUDA(cudaStreamCreate(&streams[r]));
    ASSERT_CUDA(cudaMalloc(&bufs[r], count * sizeof(float)));
    std::vector<float> host(count, float(r + 1));
    ASSERT_CUDA(cudaMemcpy(bufs[r], host.data(), count * 4, cudaMemcpyHostToDevice));
  }
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < ndev; ++r) {
    ASSERT_NCCL(ncclAllReduce(bufs[r], bufs[r], count, ncclFloat, ncclSum, comms[r], streams[r]));
  }
  ASSERT_NCCL(ncclGroupEnd());
  const float expected = ndev * (ndev + 1) / 2.0f;
  for (int r = 0; r < ndev; ++r) {
    ASSERT_CUDA(cudaSetDevice(r));
    ASSERT_CUDA(cudaStreamSynchronize(streams[r]));
    std::vector<float> host(count);
    ASSERT_CUDA(cudaMemcpy(host.data(), bufs[r], count * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(host[0], expected);
    EXPECT_EQ(host[count - 1], expected);
    cudaFree(bufs[r]);
    cudaStreamDestroy(streams[r]);
    ncclCommDestroy(comms[r]);
  }
}

}  // namespace
