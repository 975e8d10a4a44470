// The expert weight formats of the quantised mixture-of-experts kernels (moe_quantized.cu): how a
// thread finds a weight row, loads one 32-input group of it and decodes the group into 16 bf16
// pairs for mma.sync, exactly the bf16 weights a dense copy would hold. MXFP4 (E2M1 codes, E8M0
// scales per 32 inputs) and FP8 (E4M3 codes, f32 scales per 128 x 128 block); MoeWeightFormat
// says how each is stored. Device code, included by moe_quantized.cu only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/moe_quantized.h"

namespace xserv::kernels::cuda::moe {

// 2^(s - 127) as bf16 bits, twice, for an E8M0 scale s > 128 (the smaller ones are folded into
// one multiplier, ScaleFp4Pairs); 255 gives infinity, as the CPU's ldexp(1, 128) does.
__device__ __forceinline__ uint32_t ScaleBf16x2(uint32_t s) { return (s << 7) | (s << 23); }

__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162 y = *reinterpret_cast<const __nv_bfloat162*>(&b);
  x = __hmul2(x, y);
  return *reinterpret_cast<const uint32_t*>(&x);
}

// Codes j and j + 4 of the 8 in a 32-bit word w (code i in bits 4i..4i+3, input i of the word)
// as bf16 bits of value * 2^-126: the magnitude bits e1 e0 m land on the exponent's two lowest
// bits and the mantissa's top bit, the sign on the sign. E2M1's subnormal (e = 0: 0 or 0.5)
// becomes a bf16 subnormal of the same scaled value, so one multiply by 2^126 (folded into the
// group scale) restores every code exactly. Callers pass w for j = 0, 1 and w >> 8 for j = 2, 3.
template <int kJ>
__device__ __forceinline__ uint32_t Fp4PairBits(uint32_t w) {
  static_assert(kJ == 0 || kJ == 1);
  // Both codes at the bottom of their halves (bits 0..3, 16..19), then copies of them shifted by
  // 6 (magnitude to bits 6..8) and by 12 (sign to bit 15): the copies' bits do not overlap.
  constexpr uint32_t kCodes = 0x000F000Fu << (4 * kJ);
  constexpr uint32_t kSpread = 0x1040u >> (4 * kJ);
  return ((w & kCodes) * kSpread) & 0x81C081C0u;
}

// bf16x2 multiplier that turns Fp4PairBits into the dequantised weight: 2^126 * 2^(s - 127).
// One multiply while 2^(s - 1) is a normal bf16 (s <= 128); otherwise two (2^126, then the scale,
// 255 giving infinity as in ScaleBf16x2).
constexpr uint32_t kBf16x2Two126 = (253u << 7) | (253u << 23);
__device__ __forceinline__ void ScaleFp4Pairs(uint32_t (&pairs)[16], uint32_t s) {
  if (s <= 128) {
    const uint32_t f = (s + 126) << 7;
#pragma unroll
    for (int i = 0; i < 16; ++i) pairs[i] = MulBf16x2(pairs[i], f | (f << 16));
  } else {
    const uint32_t f = ScaleBf16x2(s);
#pragma unroll
    for (int i = 0; i < 16; ++i) pairs[i] = MulBf16x2(MulBf16x2(pairs[i], kBf16x2Two126), f);
  }
}

// The same multiplier as two factors applied to every pair, for decoding a pair at a time
// (DecodeFp4Pair): 2^(s - 1) and 1 while s <= 128, else 2^126 and the scale.
struct Fp4Scale {
  uint32_t first, second;
};
__device__ __forceinline__ Fp4Scale MakeFp4Scale(uint32_t s) {
  if (s <= 128) {
    const uint32_t f = (s + 126) << 7;
    return {f | (f << 16), 0x3F803F80u};
  }
  return {kBf16x2Two126, ScaleBf16x2(s)};
}

// Whether the second factor is 1 (s <= 128), which kOneFactor below may then skip (exact: a
// bf16 multiply by 1 changes nothing).
__device__ __forceinline__ bool OneFactor(const Fp4Scale& scale) {
  return scale.second == 0x3F803F80u;
}

// Pair kP (0..15) of a group's 16 bytes, dequantised (see DecodeFp4Group for the pair order);
// kOneFactor: only the first factor, for a scale with OneFactor.
template <int kP, bool kOneFactor = false>
__device__ __forceinline__ uint32_t DecodeFp4Pair(const uint4& raw, const Fp4Scale& scale) {
  constexpr int kV = kP / 4, kJ = kP % 4;
  const uint32_t word = kV == 0 ? raw.x : kV == 1 ? raw.y : kV == 2 ? raw.z : raw.w;
  const uint32_t bits = Fp4PairBits<kJ % 2>(kJ < 2 ? word : word >> 8);
  const uint32_t scaled = MulBf16x2(bits, scale.first);
  return kOneFactor ? scaled : MulBf16x2(scaled, scale.second);
}

// A group's 32 codes (16 bytes) as 16 dequantised bf16 pairs: pair 4v + j holds inputs
// (8v + j, 8v + j + 4) of the group.
__device__ __forceinline__ void DecodeFp4Group(const uint4& raw, uint32_t s,
                                               uint32_t (&pairs)[16]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint32_t hi = words[v] >> 8;
    pairs[4 * v + 0] = Fp4PairBits<0>(words[v]);
    pairs[4 * v + 1] = Fp4PairBits<1>(words[v]);
    pairs[4 * v + 2] = Fp4PairBits<0>(hi);
    pairs[4 * v + 3] = Fp4PairBits<1>(hi);
  }
  ScaleFp4Pairs(pairs, s);
}

// A weight format's access to the experts (MoeWeightFormat): Row names row n of expert e (n
// clamped into the matrix: rows past N load a valid row, unused); Load reads group grp (32
// inputs) of a row with its scale, zero codes past the row's `groups`; Pair<kP> decodes pair kP
// of a group (DecodeFp4Group's order: pair 4v + j holds inputs 8v + j and 8v + j + 4) with the
// group's decoding multiplier (MultiplierOf), and Decode all 16 pairs. Pair<kP, true> is the
// same for a multiplier with OneFactor, in fewer instructions where the format has two factors
// (kTwoFactors). kGemvChunksInFlight and kGemvMinCtasPerSm size the GEMV's loads ahead against
// its registers.
struct Mxfp4Format {
  struct Row {
    const uint4* blocks;
    const uint8_t* scales;
  };
  struct Group {
    uint4 codes;
    uint32_t scale;  // E8M0
  };
  using Multiplier = Fp4Scale;
  // 6 CTAs per SM (at most 85 registers) with 3 chunks in flight measured 2.05 ms/step at one
  // token against 2.12 with 4 CTAs of 6 chunks and 2.22 with 5 of 5 (gpt-oss-20b; docs/benchmarks,
  // session 11). More CTAs hide more of each one's load latency.
  static constexpr int kGemvChunksInFlight = 3;
  static constexpr int kGemvMinCtasPerSm = 6;
  static constexpr int kGemmChunksInFlight = 2;  // weight chunks loaded ahead of their MMAs
  static constexpr int kGemmMinCtasPerSm = 2;

  static __device__ __forceinline__ Row RowOf(const MoeGemmArgs& a, int e, int n) {
    const int groups = a.k / 32;
    const int64_t row = static_cast<int64_t>(e) * a.n + min(n, a.n - 1);
    return {reinterpret_cast<const uint4*>(a.blocks + row * groups * 16),
            static_cast<const uint8_t*>(a.scales) + row * groups};
  }
  // Past the row: zero codes with scale 2^-127, adding 0.
  static __device__ __forceinline__ Group Load(const Row& row, int grp, int groups) {
    const bool in = grp < groups;
    return {in ? __ldg(row.blocks + grp) : make_uint4(0, 0, 0, 0),
            in ? static_cast<uint32_t>(__ldg(row.scales + grp)) : 0u};
  }
  static __device__ __forceinline__ Multiplier MultiplierOf(const Group& g) {
    return MakeFp4Scale(g.scale);
  }
  static constexpr bool kTwoFactors = true;
  static __device__ __forceinline__ bool OneFactor(const Multiplier& m) {
    return moe::OneFactor(m);
  }
  template <int kP, bool kOneFactor = false>
  static __device__ __forceinline__ uint32_t Pair(const Group& g, const Multiplier& m) {
    return DecodeFp4Pair<kP, kOneFactor>(g.codes, m);
  }
  static __device__ __forceinline__ void Decode(const Group& g, uint32_t (&pairs)[16]) {
    DecodeFp4Group(g.codes, g.scale, pairs);
  }
};

struct Fp8Format {
  struct Row {
    const uint4* codes;
    const float* scales;  // the scales of the row's 128-row block, one per 128 inputs
  };
  struct Group {
    uint4 lo, hi;    // inputs 0-15 and 16-31
    uint32_t scale;  // the block scale as bf16, twice
  };
  using Multiplier = uint32_t;
  // Twice the bytes of MXFP4 per group. Measured (xserv-moe-bench --format fp8, one layer of
  // gpt-oss-20b, µs at 1 / 2 / 64 / 256 tokens; docs/benchmarks, session 17): the GEMV with 2
  // chunks in flight at 5 CTAs per SM 45.7 / 73.9 against 47.1 / 77.9 with 3 at 4; the GEMM with
  // 1 chunk in flight 421 / 571 against 480 / 625 with 2 (72 bytes spilled) and 557 / 779 with 2
  // at one CTA per SM.
  static constexpr int kGemvChunksInFlight = 2;
  static constexpr int kGemvMinCtasPerSm = 5;
  static constexpr int kGemmChunksInFlight = 1;
  static constexpr int kGemmMinCtasPerSm = 2;

  static __device__ __forceinline__ Row RowOf(const MoeGemmArgs& a, int e, int n) {
    n = min(n, a.n - 1);
    const int64_t row = static_cast<int64_t>(e) * a.n + n;
    const int64_t row_blocks = (a.n + kMoeFp8Block - 1) / kMoeFp8Block;
    const int64_t col_blocks = (a.k + kMoeFp8Block - 1) / kMoeFp8Block;
    return {reinterpret_cast<const uint4*>(a.blocks + row * a.k),
            static_cast<const float*>(a.scales) + (e * row_blocks + n / kMoeFp8Block) * col_blocks};
  }
  // Past the row: zero codes (and scale), adding 0. A block spans 4 groups.
  static __device__ __forceinline__ Group Load(const Row& row, int grp, int groups) {
    if (grp >= groups) return {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0u};
    const uint32_t s = __bfloat16_as_ushort(__float2bfloat16_rn(__ldg(row.scales + grp / 4)));
    return {__ldg(row.codes + 2 * grp), __ldg(row.codes + 2 * grp + 1), s | (s << 16)};
  }
  static __device__ __forceinline__ Multiplier MultiplierOf(const Group& g) { return g.scale; }
  static constexpr bool kTwoFactors = false;
  static __device__ __forceinline__ bool OneFactor(const Multiplier&) { return true; }
  // Inputs 8v + j and 8v + j + 4 are byte j of words 2v and 2v + 1 of the group's 32 bytes.
  template <int kP, bool kOneFactor = false>
  static __device__ __forceinline__ uint32_t Pair(const Group& g, const Multiplier& m) {
    constexpr int kV = kP / 4, kJ = kP % 4;
    const uint4& half = kV < 2 ? g.lo : g.hi;
    const uint32_t first = kV % 2 == 0 ? half.x : half.z;
    const uint32_t second = kV % 2 == 0 ? half.y : half.w;
    constexpr uint32_t kSelect = kJ | (kJ << 4) | ((4 + kJ) << 8) | ((4 + kJ) << 12);
    return MulBf16x2(Fp8CodesToBf16x2(__byte_perm(first, second, kSelect)), m);
  }
  static __device__ __forceinline__ void Decode(const Group& g, uint32_t (&pairs)[16]) {
    DecodeAll(g, pairs, std::make_integer_sequence<int, 16>{});
  }

 private:
  template <int... kP>
  static __device__ __forceinline__ void DecodeAll(const Group& g, uint32_t (&pairs)[16],
                                                   std::integer_sequence<int, kP...>) {
    ((pairs[kP] = Pair<kP>(g, g.scale)), ...);
  }
};

}  // namespace xserv::kernels::cuda::moe
