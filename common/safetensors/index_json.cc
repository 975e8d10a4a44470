#include "common/safetensors/index_json.h"

#include <exception>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace xserv::safetensors {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(std::string_view label, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(label), ": invalid shard index: ", std::string(what)));
}

// Shards must live inside the checkpoint directory: a hostile index must not make us map
// arbitrary files.
bool IsSafeRelativePath(const std::string& name) {
  if (name.empty()) return false;
  const std::filesystem::path path(name);
  if (path.is_absolute()) return false;
  for (const auto& part : path) {
    if (part == "..") return false;
  }
  return true;
}

absl::StatusOr<ShardIndex> ParseUnchecked(std::string_view json_text, std::string_view label) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) return Invalid(label, "not valid JSON");
  if (!root.is_object()) return Invalid(label, "not a JSON object");
  ShardIndex index;
  if (const auto meta = root.find("metadata"); meta != root.end() && meta->is_object()) {
    if (const auto total = meta->find("total_size");
        total != meta->end() && total->is_number_unsigned()) {
      index.total_size = total->get<uint64_t>();
    }
  }
  const auto map = root.find("weight_map");
  if (map == root.end()) return Invalid(label, "missing \"weight_map\"");
  if (!map->is_object()) return Invalid(label, "\"weight_map\" is not an object");
  for (const auto& [name, shard] : map->items()) {
    if (!shard.is_string()) {
      return Invalid(label, absl::StrCat("shard of tensor \"", name, "\" is not a string"));
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    if (!IsSafeRelativePath(shard_name)) {
      return Invalid(label, absl::StrCat("tensor \"", name, "\" names shard \"", shard_name,
                                         "\" outside the checkpoint directory"));
    }
    index.weight_map.emplace(name, shard_name);
  }
  return index;
}

}  // namespace

absl::StatusOr<ShardIndex> ParseShardIndex(std::string_view json_text, std::string_view label) {
  try {
    return ParseUnchecked(json_text, label);
  } catch (const std::exception& e) {
    return Invalid(label, absl::StrCat("JSON error: ", e.what()));
  }
}

absl::StatusOr<std::string> FormatShardIndex(const ShardIndex& index) {
  try {
    Json root = Json::object();
    root["metadata"] = Json::object();
    if (index.total_size.has_value()) root["metadata"]["total_size"] = *index.total_size;
    root["weight_map"] = Json::object();
    for (const auto& [name, shard] : index.weight_map) root["weight_map"][name] = shard;
    return root.dump(2) + "\n";
  } catch (const std::exception& e) {
    // dump() throws on names that are not valid UTF-8.
    return absl::InvalidArgumentError(absl::StrCat("cannot format shard index: ", e.what()));
  }
}

}  // namespace xserv::safetensors
