// MXFP4 (OCP microscaling FP4) decoding of HF gpt-oss expert tensors, on the host.
//
// Layout (HF checkpoint, see ../shared/refdata/gpt-oss-20b/MXFP4_NOTES.md): blocks u8
// [..., rows, groups, 16] and scales u8 [..., rows, groups]; each group holds 32 E2M1 values along
// the input dimension, two per byte (low nibble = even element); value = FP4[code] * 2^(scale-127).
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace xserv::kernels {

// The 16 E2M1 values by code (bit 3 = sign).
float Fp4E2M1Value(uint8_t code);

// Decodes `num_rows` rows of `num_groups` groups into out[num_rows, num_groups * 32] (row-major).
// blocks.size() must be num_rows * num_groups * 16, scales.size() num_rows * num_groups. Large
// inputs are decoded on several threads (up to 16); the result does not depend on their number.
absl::Status DequantizeMxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales,
                             int64_t num_rows, int64_t num_groups, std::span<float> out);

}  // namespace xserv::kernels
