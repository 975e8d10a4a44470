#include "worker/model/weight_loader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors/float_convert.h"
#include "kernels/fp8.h"

namespace xserv::model {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

int64_t TensorSlice::extent() const {
  int64_t n = 0;
  for (const Range& r : ranges) n += r.end - r.begin;
  return n;
}

std::vector<int64_t> TensorSlice::Apply(std::vector<int64_t> shape) const {
  if (dim >= 0 && dim < static_cast<int>(shape.size())) shape[dim] = extent();
  return shape;
}

absl::StatusOr<WeightLoader> WeightLoader::Open(const std::string& dir, kernels::Backend& backend) {
  auto checkpoint = safetensors::SafetensorsModel::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return WeightLoader(dir, std::move(*checkpoint), backend);
}

void WeightLoader::Count(uint64_t bytes) {
  bytes_loaded_ += bytes;
  if (progress_) progress_(bytes_loaded_, checkpoint_.TotalBytes());
}

std::optional<safetensors::TensorView> WeightLoader::Lookup(const std::string& name,
                                                            const std::vector<int64_t>& shape,
                                                            bool count) {
  used_.insert(name);
  auto view = checkpoint_.Tensor(name);
  if (!view.ok()) {
    problems_.push_back(absl::StrCat("missing tensor ", name, " ", ShapeString(shape)));
    return std::nullopt;
  }
  if (view->shape != shape) {
    problems_.push_back(absl::StrCat("tensor ", name, " has shape ", ShapeString(view->shape),
                                     ", expected ", ShapeString(shape)));
    return std::nullopt;
  }
  if (count) Count(view->data.size());
  return std::move(*view);
}

std::optional<WeightLoader::SlicedBytes> WeightLoader::LookupSlice(
    const std::string& name, const std::vector<int64_t>& shape, const TensorSlice& slice) {
  const auto rank = static_cast<int>(shape.size());
  bool valid = slice.dim >= 0 && slice.dim < rank && !slice.ranges.empty();
  for (const TensorSlice::Range& r : slice.ranges) {
    valid = valid && 0 <= r.begin && r.begin < r.end && r.end <= shape[slice.dim];
  }
  if (!valid) {  // a caller bug, but reported like every other problem of the load
    problems_.push_back(absl::StrCat("tensor ", name, ": bad slice of dim ", slice.dim, " of ",
                                     ShapeString(shape)));
    return std::nullopt;
  }
  auto view = Lookup(name, shape, /*count=*/false);  // only the slice is counted, below
  if (!view) return std::nullopt;
  // Row-major: the tensor is `outer` runs of shape[dim] sub-blocks of `inner` bytes each.
  const size_t elem = safetensors::DTypeSize(view->dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < slice.dim; ++d) outer *= shape[d];
  for (int d = slice.dim + 1; d < rank; ++d) inner *= shape[d];
  const size_t inner_bytes = static_cast<size_t>(inner) * elem;
  SlicedBytes out{.dtype = view->dtype, .shape = slice.Apply(shape), .data = {}};
  out.data.resize(static_cast<size_t>(outer * slice.extent()) * inner_bytes);
  std::byte* dst = out.data.data();
  for (int64_t o = 0; o < outer; ++o) {
    const std::byte* run = view->data.data() + o * shape[slice.dim] * inner_bytes;
    for (const TensorSlice::Range& r : slice.ranges) {
      const size_t n = static_cast<size_t>(r.end - r.begin) * inner_bytes;
      std::memcpy(dst, run + r.begin * inner_bytes, n);
      dst += n;
    }
  }
  Count(out.data.size());
  return out;
}

bool WeightLoader::ReadHostFloats(const std::string& name, const std::vector<int64_t>& shape,
                                  std::vector<float>& out) {
  auto view = Lookup(name, shape);
  if (!view) return false;
  if (!RefuseScaledFp8(name, view->dtype)) return false;
  out.resize(view->NumElements());
  if (auto status = safetensors::ConvertToFloat(view->dtype, view->data, out); !status.ok()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": ", status.message()));
    return false;
  }
  return true;
}

kernels::Buffer WeightLoader::Take(const std::string& name, std::vector<int64_t> shape) {
  return Take(name, std::move(shape), backend_->compute_dtype());
}

kernels::Buffer WeightLoader::Take(const std::string& name, std::vector<int64_t> shape,
                                   kernels::DType dtype) {
  std::vector<float> host;
  {
    auto view = Lookup(name, shape);
    if (!view) return {};
    // Stored as wanted: one copy, no conversion.
    if (view->dtype == dtype && !QuantizesOnLoad(name, shape)) {
      auto buffer = backend_->Allocate(dtype, shape);
      if (!buffer.ok() || !backend_->CopyFromHost(view->data.data(), buffer->view()).ok()) {
        problems_.push_back(absl::StrCat("tensor ", name, ": upload failed"));
        return {};
      }
      return std::move(*buffer);
    }
    if (!DecodeWeight(name, shape, /*slice=*/nullptr, view->dtype, view->data, shape, host)) {
      return {};
    }
  }
  return Upload(host, shape, dtype);
}

bool WeightLoader::DecodeWeight(const std::string& name, const std::vector<int64_t>& shape,
                                const TensorSlice* slice, safetensors::DType stored,
                                std::span<const std::byte> data,
                                const std::vector<int64_t>& held_shape, std::vector<float>& host) {
  host.resize(data.size() / safetensors::DTypeSize(stored));
  if (auto status = safetensors::ConvertToFloat(stored, data, host); !status.ok()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": ", status.message()));
    return false;
  }
  if (stored == safetensors::DType::kF8E4M3 && !ApplyFp8Scales(name, shape, slice, host)) {
    return false;
  }
  if (const int64_t block = QuantizeBlockOf(name, shape); block > 0) {
    RoundTripFp8(host, 1, held_shape[0], held_shape[1], block);
  }
  return true;
}

int64_t WeightLoader::QuantizeBlockOf(const std::string& name,
                                      const std::vector<int64_t>& shape) const {
  if (shape.size() != 2) return 0;
  if (name == "lm_head.weight") return lm_head_fp8_block_;
  const bool decoder_linear = name.starts_with("model.layers.") && name.ends_with("_proj.weight");
  return decoder_linear ? quantize_fp8_block_ : 0;
}

void WeightLoader::QuantizeFp8InPlace(std::span<float> values, int64_t matrices, int64_t rows,
                                      int64_t cols) {
  if (quantize_fp8_block_ > 0) RoundTripFp8(values, matrices, rows, cols, quantize_fp8_block_);
}

void WeightLoader::RoundTripFp8(std::span<float> values, int64_t matrices, int64_t rows,
                                int64_t cols, int64_t block) {
  for (int64_t m = 0; m < matrices; ++m) {
    const std::span<float> matrix = values.subspan(m * rows * cols, rows * cols);
    const kernels::Fp8Blocks q = kernels::QuantizeFp8Blocks(matrix, rows, cols, block);
    kernels::DequantizeFp8Blocks(q, rows, cols, block, matrix);
  }
}

bool WeightLoader::RefuseScaledFp8(const std::string& name, safetensors::DType dtype) {
  if (dtype != safetensors::DType::kF8E4M3 || !Has(name + "_scale_inv")) return true;
  problems_.push_back(absl::StrCat("tensor ", name, ": block-scaled FP8 is read through Take only"));
  return false;
}

bool WeightLoader::ApplyFp8Scales(const std::string& name, const std::vector<int64_t>& shape,
                                  const TensorSlice* slice, std::vector<float>& values) {
  const std::string scale_name = name + "_scale_inv";
  if (!Has(scale_name)) return true;  // unscaled: the stored values are the weights
  if (shape.size() != 2 || (fp8_block_.size() != 0 && fp8_block_.size() != 2)) {
    problems_.push_back(absl::StrCat("tensor ", name, ": FP8 block scales need a 2-D weight and a "
                                     "weight_block_size of two entries"));
    return false;
  }
  // One scale per tensor when no block size is configured.
  const int64_t b0 = fp8_block_.empty() ? shape[0] : fp8_block_[0];
  const int64_t b1 = fp8_block_.empty() ? shape[1] : fp8_block_[1];
  if (b0 < 1 || b1 < 1) {
    problems_.push_back(absl::StrCat("tensor ", name, ": bad FP8 block size"));
    return false;
  }
  const int64_t s0 = (shape[0] + b0 - 1) / b0, s1 = (shape[1] + b1 - 1) / b1;
  std::vector<float> scales;
  if (!ReadHostFloats(scale_name, {s0, s1}, scales)) return false;
  // The checkpoint row and column of every row and column of `values`.
  std::vector<int64_t> rows, cols;
  for (int d = 0; d < 2; ++d) {
    std::vector<int64_t>& index = d == 0 ? rows : cols;
    if (slice != nullptr && slice->dim == d) {
      for (const TensorSlice::Range& r : slice->ranges) {
        for (int64_t i = r.begin; i < r.end; ++i) index.push_back(i);
      }
    } else {
      for (int64_t i = 0; i < shape[d]; ++i) index.push_back(i);
    }
  }
  if (values.size() != rows.size() * cols.size()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": FP8 values do not match the slice"));
    return false;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* scale_row = scales.data() + (rows[i] / b0) * s1;
    float* v = values.data() + i * cols.size();
    for (size_t j = 0; j < cols.size(); ++j) v[j] *= scale_row[cols[j] / b1];
  }
  return true;
}

kernels::Buffer WeightLoader::TakeTransposed(const std::string& name, int64_t rows, int64_t cols) {
  std::vector<float> host;
  if (!ReadHostFloats(name, {cols, rows}, host)) return {};
  std::vector<float> transposed(host.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) transposed[r * cols + c] = host[c * rows + r];
  }
  return Upload(transposed, {rows, cols});
}

std::vector<uint8_t> WeightLoader::BytesOfType(const std::string& name,
                                                safetensors::DType actual, kernels::DType wanted,
                                                std::span<const std::byte> data) {
  if (actual != wanted) {
    problems_.push_back(absl::StrCat("tensor ", name, " is ",
                                     std::string(safetensors::DTypeName(actual)), ", expected ",
                                     std::string(safetensors::DTypeName(wanted))));
    return {};
  }
  std::vector<uint8_t> bytes(data.size());
  std::memcpy(bytes.data(), data.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> WeightLoader::TakeBytes(const std::string& name, std::vector<int64_t> shape,
                                             kernels::DType dtype) {
  auto view = Lookup(name, shape);
  if (!view) return {};
  return BytesOfType(name, view->dtype, dtype, view->data);
}

kernels::Buffer WeightLoader::UploadBytes(std::span<const uint8_t> bytes,
                                          std::vector<int64_t> shape) {
  auto buffer = backend_->Allocate(kernels::DType::kU8, shape);
  if (!buffer.ok() || !backend_->CopyFromHost(bytes.data(), buffer->view()).ok()) {
    problems_.push_back(absl::StrCat("upload of ", ShapeString(shape), " failed"));
    return {};
  }
  return std::move(*buffer);
}

kernels::Buffer WeightLoader::Upload(std::span<const float> values, std::vector<int64_t> shape) {
  return Upload(values, std::move(shape), backend_->compute_dtype());
}

kernels::Buffer WeightLoader::Upload(std::span<const float> values, std::vector<int64_t> shape,
                                     kernels::DType dtype) {
  auto buffer = backend_->Allocate(kernels::DType::kF32, shape);
  if (!buffer.ok() || !backend_->CopyFromHost(values.data(), buffer->view()).ok()) {
    problems_.push_back(absl::StrCat("upload of ", ShapeString(shape), " failed"));
    return {};
  }
  if (dtype == kernels::DType::kF32) return std::move(*buffer);
  auto converted = backend_->Allocate(dtype, shape);
  if (!converted.ok() || !backend_->Convert(buffer->view(), converted->view()).ok()) {
    problems_.push_back(absl::StrCat("conversion of ", ShapeString(shape), " failed"));
    return {};
  }
  return std::move(*converted);
}

bool WeightLoader::ReadHostFloats(const std::string& name, const std::vector<int64_t>& shape,
                                  const TensorSlice& slice, std::vector<float>& out) {
  auto sliced = LookupSlice(name, shape, slice);
  if (!sliced) return false;
  if (!RefuseScaledFp8(name, sliced->dtype)) return false;
  out.resize(sliced->data.size() / safetensors::DTypeSize(sliced->dtype));
  if (auto status = safetensors::ConvertToFloat(sliced->dtype, sliced->data, out); !status.ok()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": ", status.message()));
    return false;
  }
  return true;
}

kernels::Buffer WeightLoader::Take(const std::string& name, const std::vector<int64_t>& shape,
                                   const TensorSlice& slice) {
  return Take(name, shape, slice, backend_->compute_dtype());
}

kernels::Buffer WeightLoader::Take(const std::string& name, const std::vector<int64_t>& shape,
                                   const TensorSlice& slice, kernels::DType dtype) {
  std::vector<float> host;
  {
    auto sliced = LookupSlice(name, shape, slice);
    if (!sliced) return {};
    // No conversion: upload the gathered bytes.
    if (sliced->dtype == dtype && !QuantizesOnLoad(name, shape)) {
      auto buffer = backend_->Allocate(dtype, sliced->shape);
      if (!buffer.ok() || !backend_->CopyFromHost(sliced->data.data(), buffer->view()).ok()) {
        problems_.push_back(absl::StrCat("tensor ", name, ": upload failed"));
        return {};
      }
      return std::move(*buffer);
    }
    if (!DecodeWeight(name, shape, &slice, sliced->dtype, sliced->data, sliced->shape, host)) {
      return {};
    }
  }
  return Upload(host, slice.Apply(shape), dtype);
}

kernels::Buffer WeightLoader::TakeTransposed(const std::string& name, int64_t rows, int64_t cols,
                                             const TensorSlice& slice) {
  // Dimension d of the [rows, cols] result is dimension 1 - d of the stored [cols, rows].
  const TensorSlice stored{.dim = 1 - slice.dim, .ranges = slice.ranges};
  std::vector<float> host;
  if (!ReadHostFloats(name, {cols, rows}, stored, host)) return {};
  const std::vector<int64_t> out_shape = slice.Apply({rows, cols});
  const int64_t out_rows = out_shape[0], out_cols = out_shape[1];
  std::vector<float> transposed(host.size());
  for (int64_t r = 0; r < out_rows; ++r) {
    for (int64_t c = 0; c < out_cols; ++c) transposed[r * out_cols + c] = host[c * out_rows + r];
  }
  return Upload(transposed, out_shape);
}

std::vector<uint8_t> WeightLoader::TakeBytes(const std::string& name,
                                             const std::vector<int64_t>& shape,
                                             kernels::DType dtype, const TensorSlice& slice) {
  auto sliced = LookupSlice(name, shape, slice);
  if (!sliced) return {};
  return BytesOfType(name, sliced->dtype, dtype, sliced->data);
}

std::optional<WeightLoader::Fp8HostWeight> WeightLoader::TakeFp8(
    const std::string& name, const std::vector<int64_t>& shape, const TensorSlice* slice) {
  if (!fp8_matmuls_ || shape.size() != 2) return std::nullopt;
  const std::vector<int64_t> held = slice != nullptr ? slice->Apply(shape) : shape;
  Fp8HostWeight w{.rows = held[0], .cols = held[1]};
  if (const int64_t block = QuantizeBlockOf(name, shape); block > 0) {
    std::vector<float> host;
    const bool read = slice != nullptr ? ReadHostFloats(name, shape, *slice, host)
                                       : ReadHostFloats(name, shape, host);
    if (!read) return w;
    kernels::Fp8Blocks q = kernels::QuantizeFp8Blocks(host, w.rows, w.cols, block);
    w.codes = std::move(q.codes);
    w.scales = std::move(q.scale_inv);
    w.block = block;
    return w;
  }
  // An FP8 checkpoint's own codes and scales, when its blocks are square and the slice keeps them.
  const std::string scale_name = name + "_scale_inv";
  if (!Has(name) || !Has(scale_name) || fp8_block_.size() != 2 || fp8_block_[0] != fp8_block_[1] ||
      fp8_block_[0] < 1) {
    return std::nullopt;
  }
  auto stored = checkpoint_.Tensor(name);
  if (!stored.ok() || stored->dtype != safetensors::DType::kF8E4M3) return std::nullopt;
  const int64_t b = fp8_block_[0];
  if (slice != nullptr) {
    for (const TensorSlice::Range& r : slice->ranges) {
      const bool edge_end = r.end % b == 0 || r.end == shape[slice->dim];
      if (r.begin % b != 0 || !edge_end) return std::nullopt;
    }
  }
  w.codes = slice != nullptr ? TakeBytes(name, shape, kernels::DType::kF8E4M3, *slice)
                             : TakeBytes(name, shape, kernels::DType::kF8E4M3);
  const int64_t s0 = (shape[0] + b - 1) / b, s1 = (shape[1] + b - 1) / b;
  std::vector<float> scales;
  if (w.codes.empty() || !ReadHostFloats(scale_name, {s0, s1}, scales)) {
    w.codes.clear();
    return w;
  }
  // The held blocks' scales: block rows (or columns) of each slice range.
  std::vector<int64_t> rows, cols;
  for (int d = 0; d < 2; ++d) {
    std::vector<int64_t>& index = d == 0 ? rows : cols;
    const int64_t blocks = d == 0 ? s0 : s1;
    if (slice != nullptr && slice->dim == d) {
      for (const TensorSlice::Range& r : slice->ranges) {
        for (int64_t i = r.begin / b; i < (r.end + b - 1) / b; ++i) index.push_back(i);
      }
    } else {
      for (int64_t i = 0; i < blocks; ++i) index.push_back(i);
    }
  }
  w.scales.reserve(rows.size() * cols.size());
  for (int64_t r : rows) {
    for (int64_t c : cols) w.scales.push_back(scales[r * s1 + c]);
  }
  w.block = b;
  return w;
}

void WeightLoader::RecordFailure(const std::string& name, const absl::Status& status) {
  problems_.push_back(absl::StrCat("tensor ", name, ": ", status.message()));
}

void WeightLoader::Ignore(const std::string& name) { used_.insert(name); }

void WeightLoader::IgnorePrefix(const std::string& prefix) { ignored_prefixes_.push_back(prefix); }

absl::Status WeightLoader::Finish() const {
  std::vector<std::string> problems = problems_;
  for (const std::string& name : checkpoint_.TensorNames()) {
    if (used_.contains(name)) continue;
    const bool ignored = std::any_of(ignored_prefixes_.begin(), ignored_prefixes_.end(),
                                     [&](const std::string& p) { return name.starts_with(p); });
    if (!ignored) problems.push_back(absl::StrCat("unexpected tensor ", name));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model directory ", dir_, ": ", absl::StrJoin(problems, "; ")));
}

}  // namespace xserv::model
