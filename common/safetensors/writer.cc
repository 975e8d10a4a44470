#include "common/safetensors/writer.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/safetensors/index_json.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace xserv::safetensors {
namespace {

namespace fs = std::filesystem;
// Insertion-ordered so the header lists tensors in data order, which is easiest to inspect.
using OrderedJson = nlohmann::ordered_json;

absl::Status CheckTensors(const std::string& path, std::span<const TensorView> tensors) {
  std::set<std::string> seen;
  for (const TensorView& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name \"", tensor.name, "\" is reserved or empty"));
    }
    if (!seen.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor \"", tensor.name, "\" appears twice"));
    }
    absl::StatusOr<uint64_t> bytes = CheckedByteSize(tensor.dtype, tensor.shape);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor \"", tensor.name, "\": ", bytes.status().message()));
    }
    if (*bytes != tensor.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor \"", tensor.name, "\": shape and dtype need ", *bytes,
                       " bytes but the data holds ", tensor.data.size()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FormatHeader(const std::string& path,
                                         std::span<const TensorView> tensors,
                                         const std::map<std::string, std::string>& metadata) {
  try {
    OrderedJson header = OrderedJson::object();
    if (!metadata.empty()) {
      OrderedJson meta = OrderedJson::object();
      for (const auto& [key, value] : metadata) meta[key] = value;
      header["__metadata__"] = std::move(meta);
    }
    uint64_t offset = 0;
    for (const TensorView& tensor : tensors) {
      const uint64_t end = offset + tensor.data.size();
      header[tensor.name] = {{"dtype", std::string(DTypeName(tensor.dtype))},
                             {"shape", tensor.shape},
                             {"data_offsets", {offset, end}}};
      offset = end;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  } catch (const std::exception& e) {
    // dump() throws on strings that are not valid UTF-8.
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot format header: ", e.what()));
  }
}

// Writes the concatenation of `chunks` to `path`.tmp, then renames it over `path`.
absl::Status WriteChunksAtomically(const std::string& path,
                                   std::span<const std::span<const std::byte>> chunks) {
  const std::string tmp_path = path + ".tmp";
  std::FILE* out = std::fopen(tmp_path.c_str(), "wb");
  if (out == nullptr) return absl::InternalError(absl::StrCat(tmp_path, ": cannot create"));
  absl::Status status;
  for (std::span<const std::byte> chunk : chunks) {
    if (chunk.empty()) continue;
    if (std::fwrite(chunk.data(), 1, chunk.size(), out) != chunk.size()) {
      status = absl::InternalError(absl::StrCat(tmp_path, ": write failed"));
      break;
    }
  }
  if (std::fclose(out) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat(tmp_path, ": close failed"));
  }
  std::error_code ec;
  if (status.ok()) {
    fs::rename(tmp_path, path, ec);
    if (ec) status = absl::InternalError(absl::StrCat(path, ": rename failed: ", ec.message()));
  }
  if (!status.ok()) fs::remove(tmp_path, ec);
  return status;
}

std::span<const std::byte> BytesOf(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, std::span<const TensorView> tensors,
                              const std::map<std::string, std::string>& metadata) {
  RETURN_IF_ERROR(CheckTensors(path, tensors));
  ASSIGN_OR_RETURN(std::string header, FormatHeader(path, tensors, metadata));
  const uint64_t header_len = header.size();  // little-endian host (see float_convert.cc)
  std::vector<std::span<const std::byte>> chunks;
  chunks.reserve(tensors.size() + 2);
  chunks.push_back(std::as_bytes(std::span<const uint64_t>(&header_len, 1)));
  chunks.push_back(BytesOf(header));
  for (const TensorView& tensor : tensors) chunks.push_back(tensor.data);
  return WriteChunksAtomically(path, chunks);
}

absl::StatusOr<std::vector<std::string>> WriteShardedSafetensors(
    const std::string& dir, std::span<const TensorView> tensors,
    const std::map<std::string, std::string>& metadata, const ShardedWriteOptions& options) {
  RETURN_IF_ERROR(CheckTensors(dir, tensors));
  // Greedy split in the given order: [begin, end) index ranges of `tensors`.
  std::vector<std::pair<size_t, size_t>> ranges;
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = tensors[i].data.size();
    if (ranges.empty() || (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes)) {
      ranges.emplace_back(i, i);
      shard_bytes = 0;
    }
    ranges.back().second = i + 1;
    shard_bytes += bytes;
  }
  if (ranges.empty()) ranges.emplace_back(0, 0);  // an empty checkpoint still gets one shard

  ShardIndex index;
  index.total_size = 0;
  std::vector<std::string> shard_names;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const std::string name =
        absl::StrFormat("%s-%05d-of-%05d.safetensors", options.prefix, s + 1, ranges.size());
    const std::span<const TensorView> shard =
        tensors.subspan(ranges[s].first, ranges[s].second - ranges[s].first);
    RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / name).string(), shard, metadata));
    for (const TensorView& tensor : shard) {
      index.weight_map[tensor.name] = name;
      *index.total_size += tensor.data.size();
    }
    shard_names.push_back(name);
  }
  ASSIGN_OR_RETURN(std::string index_text, FormatShardIndex(index));
  const std::span<const std::byte> index_chunk = BytesOf(index_text);
  RETURN_IF_ERROR(WriteChunksAtomically((fs::path(dir) / std::string(kIndexFileName)).string(),
                                        {&index_chunk, 1}));
  return shard_names;
}

}  // namespace xserv::safetensors
