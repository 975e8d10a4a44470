// Warp-level tensor-core and async-copy helpers shared by the mma.sync kernels (flash prefill,
// decode attention, MXFP4 experts). sm_80+ PTX; fragments follow the PTX ISA's m16n8k16 layouts:
// a lane g = lane / 4, q4 = lane % 4 holds A rows g and g + 8, columns 2 * q4 (+1, +8, +9).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace xserv::kernels::cuda {

// d += a * b: bf16 inputs, fp32 accumulators (16x16 A row-major, 16x8 B column-major).
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same MMA with f16 operands.
__device__ __forceinline__ void MmaF16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a * b on FP8 E4M3 codes (sm_89+), m16n8k32: lane (g, q) holds A rows g (a[0], a[2]) and
// g + 8 (a[1], a[3]) at K 4q..4q+3 (a[0], a[1]) and 16 + 4q.. (a[2], a[3]), four codes a register,
// and B column g at K 4q..4q+3 (b0) and 16 + 4q.. (b1); C as in m16n8k16. fp32 accumulators.
__device__ __forceinline__ void MmaE4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two consecutive bf16 (4-byte aligned) as one fragment register.
__device__ __forceinline__ uint32_t Lds32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Four 8x8 bf16 matrices from the row addresses of lanes 8i..8i+7 (matrix i): lane l receives
// row l / 4, columns 2 * (l % 4) and + 1 of each.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8x8 bf16 matrices, transposed, from the row addresses of lanes 8i..8i+7 (matrix i).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The transpose of an 8x8 matrix of 16-bit values held as fragments (lane l: row l / 4, columns
// 2 * (l % 4) and + 1 in one register): lane l receives row l / 4 of the transpose.
__device__ __forceinline__ uint32_t MovMatrixTrans(uint32_t fragment) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(fragment));
  return r;
}

// Max / sum over the 4 lanes of a quad (the lanes that hold one row of an mma fragment).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

// 16 bytes global -> shared without a register round trip; src_bytes 0 writes zeros (and reads
// nothing, so `src` need only be a valid address).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, int src_bytes) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src),
               "r"(src_bytes));
}
// 4 bytes (through L1: .cg takes 16-byte copies only); src_bytes 0 writes zeros.
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, int src_bytes) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(addr), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace xserv::kernels::cuda
