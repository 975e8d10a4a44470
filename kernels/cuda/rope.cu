// Rotary embedding, NeoX layout, in place on bf16 [tokens, heads, head_dim].
//
// Tile: one 128-thread CTA per token; threads walk the token's heads * head_dim/2 rotation pairs.
// Each pair is read and written by one thread, so in-place update needs no barrier. cos/sin come
// from the f32 table row of the token's position; arithmetic in fp32, one bf16 rounding.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) RopeKernel(const __grid_constant__ RopeArgs a) {
  const int64_t t = blockIdx.x;
  const int half = a.head_dim / 2;
  const int pairs = a.heads * half;
  bf16* x = static_cast<bf16*>(a.x) + t * a.token_stride;
  const int32_t pos = a.positions[t];
  const bool valid = pos >= 0 && pos < a.max_positions;
  const float* cs = a.cos_sin + (valid ? static_cast<int64_t>(pos) * a.head_dim : 0);
  for (int p = threadIdx.x; p < pairs; p += kThreads) {
    const int h = p / half, i = p % half;
    bf16* v = x + static_cast<int64_t>(h) * a.head_dim;
    if (!valid) {
      v[i] = v[i + half] = QuietNaN<bf16>();
      continue;
    }
    const float2 r = RotatePair(ToFloat(v[i]), ToFloat(v[i + half]), cs[i], cs[half + i]);
    v[i] = FromFloat<bf16>(r.x);
    v[i + half] = FromFloat<bf16>(r.y);
  }
}

}  // namespace

cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream) {
  if (args.tokens == 0 || args.heads == 0) return cudaSuccess;
  RopeKernel<<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
