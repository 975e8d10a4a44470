#include "worker/model/weight_loader.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors/float_convert.h"

namespace xserv::model {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<WeightLoader> WeightLoader::Open(const std::string& dir, kernels::Backend& backend) {
  auto checkpoint = safetensors::SafetensorsModel::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return WeightLoader(dir, std::move(*checkpoint), backend);
}

std::optional<safetensors::TensorView> WeightLoader::Lookup(const std::string& name,
                                                            const std::vector<int64_t>& shape) {
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
  bytes_loaded_ += view->data.size();
  return std::move(*view);
}

bool WeightLoader::ReadHostFloats(const std::string& name, const std::vector<int64_t>& shape,
                                  std::vector<float>& out) {
  auto view = Lookup(name, shape);
  if (!view) return false;
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
    if (view->dtype == dtype) {  // stored as wanted (e.g. bf16 on CUDA): one copy, no conversion
      auto buffer = backend_->Allocate(dtype, shape);
      if (!buffer.ok() || !backend_->CopyFromHost(view->data.data(), buffer->view()).ok()) {
        problems_.push_back(absl::StrCat("tensor ", name, ": upload failed"));
        return {};
      }
      return std::move(*buffer);
    }
    host.resize(view->NumElements());
    if (auto status = safetensors::ConvertToFloat(view->dtype, view->data, host); !status.ok()) {
      problems_.push_back(absl::StrCat("tensor ", name, ": ", status.message()));
      return {};
    }
  }
  return Upload(host, shape, dtype);
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

std::vector<uint8_t> WeightLoader::TakeBytes(const std::string& name, std::vector<int64_t> shape,
                                             kernels::DType dtype) {
  auto view = Lookup(name, shape);
  if (!view) return {};
  if (view->dtype != dtype) {
    problems_.push_back(absl::StrCat("tensor ", name, " is ",
                                     std::string(safetensors::DTypeName(view->dtype)),
                                     ", expected ", std::string(safetensors::DTypeName(dtype))));
    return {};
  }
  std::vector<uint8_t> bytes(view->data.size());
  std::memcpy(bytes.data(), view->data.data(), bytes.size());
  return bytes;
}

kernels::Buffer WeightLoader::Upload(const std::vector<float>& values, std::vector<int64_t> shape) {
  return Upload(values, std::move(shape), backend_->compute_dtype());
}

kernels::Buffer WeightLoader::Upload(const std::vector<float>& values, std::vector<int64_t> shape,
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

void WeightLoader::Ignore(const std::string& name) { used_.insert(name); }

absl::Status WeightLoader::Finish() const {
  std::vector<std::string> problems = problems_;
  for (const std::string& name : checkpoint_.TensorNames()) {
    if (!used_.contains(name)) problems.push_back(absl::StrCat("unexpected tensor ", name));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model directory ", dir_, ": ", absl::StrJoin(problems, "; ")));
}

}  // namespace xserv::model
