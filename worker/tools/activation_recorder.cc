#include "worker/tools/activation_recorder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/safetensors/writer.h"

namespace xserv::tools {

model::ActivationObserver ActivationRecorder::Observer() {
  return [this](const std::string& name, const kernels::Tensor& t) { Record(name, t); };
}

void ActivationRecorder::Record(const std::string& name, const kernels::Tensor& t) {
  if (!status_.ok()) return;
  if (!t.is_contiguous() || t.rank < 1) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("activation ", name, " is not a contiguous tensor: ", t.Describe()));
    return;
  }
  const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
  auto [it, inserted] = tensors_.try_emplace(name, Recorded{t.dtype, shape, {}});
  Recorded& r = it->second;
  if (!inserted) {
    if (r.dtype != t.dtype || !std::equal(shape.begin() + 1, shape.end(), r.shape.begin() + 1,
                                          r.shape.end())) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("activation ", name, " changed dtype or row shape between chunks"));
      return;
    }
    r.shape[0] += shape[0];
  }
  const size_t offset = r.bytes.size();
  r.bytes.resize(offset + t.nbytes());
  status_ = backend_->CopyToHost(t, r.bytes.data() + offset);
}

absl::Status ActivationRecorder::Write(const std::string& path) const {
  std::vector<safetensors::TensorView> views;
  views.reserve(tensors_.size());
  for (const auto& [name, r] : tensors_) {
    views.push_back(safetensors::TensorView{
        .name = name, .dtype = r.dtype, .shape = r.shape, .data = r.bytes});
  }
  return safetensors::WriteSafetensors(path, views);
}

}  // namespace xserv::tools
