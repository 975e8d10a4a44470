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

absl::StatusOr<WeightLoader> WeightLoader::Open(const std::string& dir,
                                                kernels::Backend& backend) {
  auto checkpoint = safetensors::SafetensorsModel::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return WeightLoader(dir, std::move(*checkpoint), backend);
}

bool WeightLoader::ReadHostFloats(const std::string& name, const std::vector<int64_t>& shape,
                              std::vector<float>& out) {
  used_.insert(name);
  auto view = checkpoint_.Tensor(name);
  if (!view.ok()) {
    problems_.push_back(absl::StrCat("missing tensor ", name, " ", ShapeString(shape)));
    return false;
  }
  if (view->shape != shape) {
    problems_.push_back(absl::StrCat("tensor ", name, " has shape ", ShapeString(view->shape),
                                     ", expected ", ShapeString(shape)));
    return false;
  }
  out.resize(view->NumElements());
  if (auto status = safetensors::ConvertToFloat(view->dtype, view->data, out); !status.ok()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": ", status.message()));
    return false;
  }
  bytes_loaded_ += view->data.size();
  return true;
}

kernels::Buffer WeightLoader::Take(const std::string& name, std::vector<int64_t> shape) {
  return Take(name, std::move(shape), backend_->compute_dtype());
}

kernels::Buffer WeightLoader::Take(const std::string& name, std::vector<int64_t> shape,
                                   kernels::DType dtype) {
  std::vector<float> host;
  if (!ReadHostFloats(name, shape, host)) return {};
  auto buffer = backend_->Allocate(kernels::DType::kF32, shape);
  if (!buffer.ok() || !backend_->CopyFromHost(host.data(), buffer->view()).ok()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": upload failed"));
    return {};
  }
  if (dtype == kernels::DType::kF32) return std::move(*buffer);
  auto converted = backend_->Allocate(dtype, shape);
  if (!converted.ok() || !backend_->Convert(buffer->view(), converted->view()).ok()) {
    problems_.push_back(absl::StrCat("tensor ", name, ": conversion failed"));
    return {};
  }
  return std::move(*converted);
}

kernels::Buffer WeightLoader::TakeTransposed(const std::string& name, int64_t rows,
                                             int64_t cols) {
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
  used_.insert(name);
  auto view = checkpoint_.Tensor(name);
  if (!view.ok()) {
    problems_.push_back(absl::StrCat("missing tensor ", name, " ", ShapeString(shape)));
    return {};
  }
  if (view->shape != shape || view->dtype != dtype) {
    problems_.push_back(absl::StrCat("tensor ", name, " is ",
                                     std::string(safetensors::DTypeName(view->dtype)),
                                     ShapeString(view->shape), ", expected ",
                                     std::string(safetensors::DTypeName(dtype)),
                                     ShapeString(shape)));
    return {};
  }
  bytes_loaded_ += view->data.size();
  std::vector<uint8_t> bytes(view->data.size());
  std::memcpy(bytes.data(), view->data.data(), bytes.size());
  return bytes;
}

kernels::Buffer WeightLoader::Upload(const std::vector<float>& values, std::vector<int64_t> shape) {
  auto buffer = backend_->Allocate(kernels::DType::kF32, shape);
  if (!buffer.ok() || !backend_->CopyFromHost(values.data(), buffer->view()).ok()) {
    problems_.push_back(absl::StrCat("upload of ", ShapeString(shape), " failed"));
    return {};
  }
  if (backend_->compute_dtype() == kernels::DType::kF32) return std::move(*buffer);
  auto converted = backend_->Allocate(backend_->compute_dtype(), shape);
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
  return absl::InvalidArgumentError(absl::StrCat("model directory ", dir_, ": ",
                                                 absl::StrJoin(problems, "; ")));
}

}  // namespace xserv::model
