// ActivationRecorder: collects the activations a Model reports through its observer
// (Model::set_activation_observer) into host memory and writes them as one safetensors file,
// so a script can compare them with HF transformers' module outputs layer by layer. A tensor
// reported twice under one name (a second chunk of the same input) is appended along rows.
//
// Debug tooling: copies synchronously on every observation, so a recorded forward is slow.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "worker/model/model.h"

namespace xserv::tools {

class ActivationRecorder {
 public:
  explicit ActivationRecorder(kernels::Backend& backend) : backend_(&backend) {}

  // The observer to install on a model; the recorder must outlive its use.
  model::ActivationObserver Observer();

  // The first error met while recording (a strided or mismatched tensor, a failed copy).
  const absl::Status& status() const { return status_; }
  size_t size() const { return tensors_.size(); }

  // Writes every recorded tensor (in its own dtype, rows appended) to `path`.
  absl::Status Write(const std::string& path) const;

 private:
  struct Recorded {
    kernels::DType dtype;
    std::vector<int64_t> shape;  // dim 0 grows as chunks are appended
    std::vector<std::byte> bytes;
  };
  void Record(const std::string& name, const kernels::Tensor& t);

  kernels::Backend* backend_;
  std::map<std::string, Recorded> tensors_;
  absl::Status status_;
};

}  // namespace xserv::tools
