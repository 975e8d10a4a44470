#include "common/safetensors/safetensors_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/safetensors/index_json.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace xserv::safetensors {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path.string(), ": read error"));
  return text;
}

bool IsRegularFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

}  // namespace

absl::StatusOr<SafetensorsModel> SafetensorsModel::Open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  SafetensorsModel model;
  model.dir_ = dir;
  const fs::path root(dir);

  if (const fs::path single = root / kSingleFileName; IsRegularFile(single)) {
    model.layout_ = CheckpointLayout::kSingleFile;
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(single.string()));
    model.files_.push_back(std::move(file));
    RETURN_IF_ERROR(model.AddAllTensorsOf(0));
    return model;
  }

  if (const fs::path index_path = root / kIndexFileName; IsRegularFile(index_path)) {
    model.layout_ = CheckpointLayout::kIndexed;
    ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path));
    ASSIGN_OR_RETURN(ShardIndex index, ParseShardIndex(text, index_path.string()));
    // Open each shard once, in file-name order, remembering one tensor that needs it so a
    // missing shard's error says why it was wanted.
    std::map<std::string, std::string> shard_to_first_tensor;
    for (const auto& [name, shard] : index.weight_map) shard_to_first_tensor.emplace(shard, name);
    std::map<std::string, size_t> shard_to_file;
    for (const auto& [shard, first_tensor] : shard_to_first_tensor) {
      const fs::path shard_path = root / shard;
      if (!IsRegularFile(shard_path)) {
        return absl::NotFoundError(absl::StrCat(index_path.string(), ": shard ",
                                                shard_path.string(), " (holding tensor \"",
                                                first_tensor, "\") does not exist"));
      }
      ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(shard_path.string()));
      shard_to_file.emplace(shard, model.files_.size());
      model.files_.push_back(std::move(file));
    }
    std::vector<size_t> visible_per_file(model.files_.size(), 0);
    for (const auto& [name, shard] : index.weight_map) {
      const size_t file = shard_to_file.at(shard);
      absl::StatusOr<TensorView> view = model.files_[file].Tensor(name);
      if (!view.ok()) {
        return absl::NotFoundError(absl::StrCat(index_path.string(), ": maps tensor \"", name,
                                                "\" to ", model.files_[file].path(),
                                                ", which has no such tensor"));
      }
      model.tensor_to_file_.emplace(name, file);
      model.total_bytes_ += view->data.size();
      ++visible_per_file[file];
    }
    for (size_t i = 0; i < model.files_.size(); ++i) {
      if (visible_per_file[i] != model.files_[i].num_tensors()) {
        spdlog::warn("{}: {} of its {} tensors are not in {} and are ignored",
                     model.files_[i].path(), model.files_[i].num_tensors() - visible_per_file[i],
                     model.files_[i].num_tensors(), index_path.string());
      }
    }
    return model;
  }

  model.layout_ = CheckpointLayout::kAllFiles;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && IsRegularFile(it->path())) {
      paths.push_back(it->path());
    }
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no ", std::string(kSingleFileName), ", no ",
                                            std::string(kIndexFileName),
                                            " and no *.safetensors files"));
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path.string()));
    model.files_.push_back(std::move(file));
    RETURN_IF_ERROR(model.AddAllTensorsOf(model.files_.size() - 1));
  }
  return model;
}

absl::Status SafetensorsModel::AddAllTensorsOf(size_t file) {
  const SafetensorsFile& source = files_[file];
  for (const std::string& name : source.TensorNames()) {
    const auto [it, inserted] = tensor_to_file_.emplace(name, file);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", name, "\" is in both ", files_[it->second].path(), " and ", source.path()));
    }
  }
  total_bytes_ += source.data_bytes();
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsModel::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensor_to_file_.size());
  for (const auto& [name, file] : tensor_to_file_) names.push_back(name);
  return names;
}

bool SafetensorsModel::Contains(std::string_view name) const {
  return tensor_to_file_.contains(name);
}

const SafetensorsFile* SafetensorsModel::FileOf(std::string_view name) const {
  const auto it = tensor_to_file_.find(name);
  return it == tensor_to_file_.end() ? nullptr : &files_[it->second];
}

absl::StatusOr<TensorView> SafetensorsModel::Tensor(std::string_view name) const {
  const SafetensorsFile* file = FileOf(name);
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": checkpoint has no tensor named \"", std::string(name), "\""));
  }
  return file->Tensor(name);
}

}  // namespace xserv::safetensors
