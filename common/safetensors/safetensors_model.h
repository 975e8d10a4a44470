// All safetensors weights of a checkpoint directory, as one name -> tensor map.
//
// Move-only; owns every shard's mapping, and TensorViews borrow from it. Immutable after Open:
// const methods may be called from any number of threads concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/safetensors_file.h"
#include "common/safetensors/tensor_view.h"

namespace xserv::safetensors {

enum class CheckpointLayout {
  kSingleFile,  // model.safetensors
  kIndexed,     // model.safetensors.index.json + the shards it names
  kAllFiles,    // every *.safetensors of the directory, sorted by file name
};

class SafetensorsModel {
 public:
  // Picks the layout in transformers' order: model.safetensors, else the index, else all
  // *.safetensors files. With an index, every referenced shard must exist and hold the tensors
  // mapped to it; only the tensors the index names are visible. Without one, a tensor name that
  // appears in two files is an error. Errors name the file and the tensor.
  static absl::StatusOr<SafetensorsModel> Open(const std::string& dir);

  SafetensorsModel(SafetensorsModel&&) = default;
  SafetensorsModel& operator=(SafetensorsModel&&) = default;

  CheckpointLayout layout() const { return layout_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }

  // Sorted by name.
  std::vector<std::string> TensorNames() const;
  size_t num_tensors() const { return tensor_to_file_.size(); }
  bool Contains(std::string_view name) const;
  // NotFound naming the directory and the tensor when absent.
  absl::StatusOr<TensorView> Tensor(std::string_view name) const;
  // The file that holds `name`, or nullptr.
  const SafetensorsFile* FileOf(std::string_view name) const;
  // Sum of the data bytes of the visible tensors.
  uint64_t TotalBytes() const { return total_bytes_; }

 private:
  SafetensorsModel() = default;
  absl::Status AddAllTensorsOf(size_t file);

  std::string dir_;
  CheckpointLayout layout_ = CheckpointLayout::kSingleFile;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> tensor_to_file_;
  uint64_t total_bytes_ = 0;
};

}  // namespace xserv::safetensors
