#include "kernels/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace xserv::kernels {
namespace {

// HF: base ** (arange(0, dim, 2).float() / dim), all in fp32.
std::vector<float> BaseInverseFrequencies(const RopeSpec& spec) {
  const int half = spec.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(spec.head_dim);
    const float pos_freq = std::pow(static_cast<float>(spec.theta), exponent);
    inv[i] = 1.0f / pos_freq;
  }
  return inv;
}

void ApplyLlama3(const RopeSpec& spec, std::vector<float>& inv) {
  const double old_context = spec.original_max_position_embeddings;
  const double low_freq_wavelen = old_context / spec.low_freq_factor;
  const double high_freq_wavelen = old_context / spec.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = static_cast<float>(f / spec.factor);  // long wavelengths: fully interpolated
    } else if (wavelen >= high_freq_wavelen) {  // medium: smooth blend
      const double smooth = (old_context / wavelen - spec.low_freq_factor) /
                            (spec.high_freq_factor - spec.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / spec.factor + smooth * f);
    }
  }
}

double YarnCorrectionDim(double rotations, const RopeSpec& spec) {
  return (spec.head_dim *
          std::log(spec.original_max_position_embeddings / (rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(spec.theta));
}

void ApplyYarn(const RopeSpec& spec, std::vector<float>& inv) {
  double low = YarnCorrectionDim(spec.beta_fast, spec);
  double high = YarnCorrectionDim(spec.beta_slow, spec);
  if (spec.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(spec.head_dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (size_t i = 0; i < inv.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(spec.head_dim);
    const float pos_freq = std::pow(static_cast<float>(spec.theta), exponent);
    const float extrapolation = inv[i];  // 1 / pos_freq
    const float interpolation = 1.0f / (static_cast<float>(spec.factor) * pos_freq);
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)),
                                  0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

absl::StatusOr<std::vector<float>> RopeInverseFrequencies(const RopeSpec& spec) {
  if (spec.head_dim <= 0 || spec.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope head_dim must be even and positive, got ",
                                                   spec.head_dim));
  }
  if (spec.theta <= 0) return absl::InvalidArgumentError("rope theta must be positive");
  std::vector<float> inv = BaseInverseFrequencies(spec);
  switch (spec.type) {
    case RopeSpec::Type::kDefault:
      break;
    case RopeSpec::Type::kLinear:
      if (spec.factor <= 0) return absl::InvalidArgumentError("linear rope factor must be > 0");
      for (float& f : inv) f = static_cast<float>(f / spec.factor);
      break;
    case RopeSpec::Type::kLlama3:
      if (spec.factor <= 0 || spec.original_max_position_embeddings <= 0 ||
          spec.high_freq_factor <= spec.low_freq_factor) {
        return absl::InvalidArgumentError(
            "llama3 rope needs factor > 0, original_max_position_embeddings > 0 and "
            "high_freq_factor > low_freq_factor");
      }
      ApplyLlama3(spec, inv);
      break;
    case RopeSpec::Type::kYarn:
      if (spec.factor <= 0 || spec.original_max_position_embeddings <= 0) {
        return absl::InvalidArgumentError(
            "yarn rope needs factor > 0 and original_max_position_embeddings > 0");
      }
      ApplyYarn(spec, inv);
      break;
  }
  return inv;
}

double RopeAttentionFactor(const RopeSpec& spec) {
  if (spec.type != RopeSpec::Type::kYarn) return 1.0;
  if (spec.attention_factor > 0) return spec.attention_factor;
  return spec.factor <= 1.0 ? 1.0 : 0.1 * std::log(spec.factor) + 1.0;
}

absl::StatusOr<std::vector<float>> BuildRopeTable(const RopeSpec& spec, int max_positions) {
  auto inv = RopeInverseFrequencies(spec);
  if (!inv.ok()) return inv.status();
  if (max_positions <= 0) return absl::InvalidArgumentError("rope max_positions must be > 0");
  const int half = spec.head_dim / 2;
  const float attention_factor = static_cast<float>(RopeAttentionFactor(spec));
  std::vector<float> table(static_cast<size_t>(max_positions) * spec.head_dim);
  for (int p = 0; p < max_positions; ++p) {
    float* row = table.data() + static_cast<size_t>(p) * spec.head_dim;
    for (int i = 0; i < half; ++i) {
      // fp32 product as HF computes it; cos/sin of that fp32 angle, correctly rounded.
      const float angle = static_cast<float>(p) * (*inv)[i];
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
    }
  }
  return table;
}

}  // namespace xserv::kernels
