#include "common/safetensors/safetensors_file.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::safetensors {

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile mapping, MappedFile::Open(path));
  ASSIGN_OR_RETURN(FileLayout layout, ParseFileLayout(mapping.bytes(), path));
  return SafetensorsFile(path, std::move(mapping), std::move(layout));
}

SafetensorsFile::SafetensorsFile(std::string path, MappedFile mapping, FileLayout layout)
    : path_(std::move(path)), mapping_(std::move(mapping)), layout_(std::move(layout)) {
  for (size_t i = 0; i < layout_.tensors.size(); ++i) index_.emplace(layout_.tensors[i].name, i);
}

uint64_t SafetensorsFile::data_bytes() const {
  return mapping_.bytes().size() - layout_.data_start;
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(layout_.tensors.size());
  for (const TensorEntry& entry : layout_.tensors) names.push_back(entry.name);
  return names;
}

bool SafetensorsFile::Contains(std::string_view name) const { return index_.contains(name); }

absl::StatusOr<TensorView> SafetensorsFile::Tensor(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no tensor named \"", std::string(name), "\""));
  }
  return ViewOf(layout_.tensors[it->second]);
}

TensorView SafetensorsFile::ViewOf(const TensorEntry& entry) const {
  // ParseFileLayout proved [data_start + begin, data_start + end) lies inside the mapping.
  const std::span<const std::byte> data =
      mapping_.bytes().subspan(layout_.data_start + entry.begin, entry.end - entry.begin);
  return TensorView{.name = entry.name, .dtype = entry.dtype, .shape = entry.shape, .data = data};
}

void SafetensorsFile::AdviseWillNeed() const {
  mapping_.AdviseWillNeed(mapping_.bytes().subspan(layout_.data_start));
}

}  // namespace xserv::safetensors
