// One safetensors file, memory-mapped and validated at Open.
//
// Move-only; owns the mapping, and every TensorView it returns borrows from it, so views must not
// outlive the SafetensorsFile. After Open the object is immutable: all const methods may be
// called from any number of threads concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/header.h"
#include "common/safetensors/mapped_file.h"
#include "common/safetensors/tensor_view.h"

namespace xserv::safetensors {

class SafetensorsFile {
 public:
  // Maps `path` and validates it fully (see ParseFileLayout); a file that opens is safe to read
  // at every offset its tensors name. Errors name the path and, where one is at fault, the tensor.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return layout_.metadata; }
  size_t num_tensors() const { return layout_.tensors.size(); }
  // Bytes of tensor data (the file size minus the header).
  uint64_t data_bytes() const;

  // Names in file order (by data offset).
  std::vector<std::string> TensorNames() const;
  bool Contains(std::string_view name) const;
  // NotFound naming the file and tensor when absent.
  absl::StatusOr<TensorView> Tensor(std::string_view name) const;

  // Asks the kernel to read the whole data section ahead (before a bulk upload).
  void AdviseWillNeed() const;

 private:
  SafetensorsFile(std::string path, MappedFile mapping, FileLayout layout);
  TensorView ViewOf(const TensorEntry& entry) const;

  std::string path_;
  MappedFile mapping_;
  FileLayout layout_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in layout_.tensors
};

}  // namespace xserv::safetensors
