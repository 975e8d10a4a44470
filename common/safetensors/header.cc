#include "common/safetensors/header.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/safetensors/tensor_view.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace xserv::safetensors {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(std::string_view label, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(label), ": invalid safetensors header: ", std::string(what)));
}

absl::Status InvalidTensor(std::string_view label, std::string_view tensor, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": tensor \"",
                                                 std::string(tensor), "\": ", std::string(what)));
}

// JSON integers that fit in int64 and are >= 0; floats ("2.0") and negatives are refused, as
// the reference's usize fields refuse them.
bool GetNonNegative(const Json& value, uint64_t max, uint64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > max) return false;
    *out = v;
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return *out <= max;
  }
  return false;
}

absl::StatusOr<TensorEntry> ParseEntry(const std::string& name, const Json& info,
                                       std::string_view label) {
  if (!info.is_object()) return InvalidTensor(label, name, "entry is not a JSON object");
  TensorEntry entry;
  entry.name = name;

  const auto dtype_it = info.find("dtype");
  if (dtype_it == info.end()) return InvalidTensor(label, name, "missing \"dtype\"");
  if (!dtype_it->is_string()) return InvalidTensor(label, name, "\"dtype\" is not a string");
  absl::StatusOr<DType> dtype = ParseDType(dtype_it->get_ref<const std::string&>());
  if (!dtype.ok()) return InvalidTensor(label, name, std::string(dtype.status().message()));
  entry.dtype = *dtype;

  const auto shape_it = info.find("shape");
  if (shape_it == info.end()) return InvalidTensor(label, name, "missing \"shape\"");
  if (!shape_it->is_array()) return InvalidTensor(label, name, "\"shape\" is not an array");
  for (const Json& dim : *shape_it) {
    uint64_t value = 0;
    if (dim.is_number_integer() && !dim.is_number_unsigned() && dim.get<int64_t>() < 0) {
      return InvalidTensor(label, name,
                           absl::StrCat("negative dim ", dim.get<int64_t>(), " in shape"));
    }
    if (!GetNonNegative(dim, std::numeric_limits<int64_t>::max(), &value)) {
      return InvalidTensor(label, name,
                           absl::StrCat("shape entry ", dim.dump(),
                                        " is not an integer in "
                                        "[0, 2^63)"));
    }
    entry.shape.push_back(static_cast<int64_t>(value));
  }

  const auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end()) return InvalidTensor(label, name, "missing \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !GetNonNegative((*offsets_it)[0], std::numeric_limits<int64_t>::max(), &entry.begin) ||
      !GetNonNegative((*offsets_it)[1], std::numeric_limits<int64_t>::max(), &entry.end)) {
    return InvalidTensor(label, name,
                         "\"data_offsets\" is not [begin, end] of non-negative integers");
  }
  if (entry.end < entry.begin) {
    return InvalidTensor(label, name,
                         absl::StrCat("data_offsets end ", entry.end, " < begin ", entry.begin));
  }
  absl::StatusOr<uint64_t> bytes = CheckedByteSize(entry.dtype, entry.shape);
  if (!bytes.ok()) return InvalidTensor(label, name, std::string(bytes.status().message()));
  if (*bytes != entry.end - entry.begin) {
    return InvalidTensor(
        label, name,
        absl::StrCat("shape and dtype need ", *bytes, " bytes but data_offsets [", entry.begin,
                     ", ", entry.end, ") span ", entry.end - entry.begin));
  }
  return entry;
}

absl::Status ParseMetadata(const Json& value, std::string_view label,
                           std::map<std::string, std::string>* out) {
  if (value.is_null()) return absl::OkStatus();
  if (!value.is_object()) return Invalid(label, "\"__metadata__\" is not an object");
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return Invalid(label,
                     absl::StrCat("\"__metadata__\" value for \"", key, "\" is not a string"));
    }
    (*out)[key] = item.get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<FileLayout> ParseLayoutUnchecked(std::span<const std::byte> file_bytes,
                                                std::string_view label) {
  if (file_bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(std::string(label), ": file is ", file_bytes.size(),
                                            " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_bytes.data(), 8);  // little-endian hosts only (static_assert'd)
  if (header_len > kMaxHeaderBytes) {
    return Invalid(label, absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                       kMaxHeaderBytes));
  }
  if (header_len > file_bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(std::string(label), ": header length ", header_len,
                                            " exceeds the ", file_bytes.size() - 8,
                                            " bytes after the length prefix (truncated file?)"));
  }
  const char* header_chars = reinterpret_cast<const char*>(file_bytes.data() + 8);
  const std::string_view header_text(header_chars, header_len);
  if (header_text.empty() || header_text.front() != '{') {
    return Invalid(label, "header does not start with '{'");
  }
  const Json header = Json::parse(header_text.begin(), header_text.end(), /*cb=*/nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) return Invalid(label, "header is not valid JSON");
  if (!header.is_object()) return Invalid(label, "header is not a JSON object");

  FileLayout layout;
  layout.data_start = 8 + header_len;
  const uint64_t data_size = file_bytes.size() - layout.data_start;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(value, label, &layout.metadata));
      continue;
    }
    ASSIGN_OR_RETURN(TensorEntry entry, ParseEntry(key, value, label));
    layout.tensors.push_back(std::move(entry));
  }

  std::sort(layout.tensors.begin(), layout.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  // Contiguous cover of the data section, as the reference reader demands: anything else is
  // either overlapping (two tensors aliasing bytes) or a file the reference would refuse.
  uint64_t expected_begin = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& entry : layout.tensors) {
    if (entry.end > data_size) {
      return absl::DataLossError(absl::StrCat(
          std::string(label), ": tensor \"", entry.name, "\": data_offsets [", entry.begin, ", ",
          entry.end, ") run past the end of the ", data_size, "-byte data section"));
    }
    if (entry.begin < expected_begin) {
      return InvalidTensor(label, entry.name,
                           absl::StrCat("data_offsets [", entry.begin, ", ", entry.end,
                                        ") overlap tensor \"", previous->name, "\""));
    }
    if (entry.begin > expected_begin) {
      return InvalidTensor(label, entry.name,
                           absl::StrCat("gap in the data section: tensor starts at ", entry.begin,
                                        " but the previous one ends at ", expected_begin));
    }
    expected_begin = entry.end;
    previous = &entry;
  }
  if (expected_begin != data_size) {
    return Invalid(label, absl::StrCat("tensors cover ", expected_begin,
                                       " bytes but the data "
                                       "section holds ",
                                       data_size, " (trailing bytes or truncated tensors)"));
  }
  return layout;
}

}  // namespace

absl::StatusOr<FileLayout> ParseFileLayout(std::span<const std::byte> file_bytes,
                                           std::string_view label) {
  // nlohmann throws on a few paths even with allow_exceptions=false (e.g. allocation); this is
  // the module's one adapter, so nothing escapes it.
  try {
    return ParseLayoutUnchecked(file_bytes, label);
  } catch (const std::exception& e) {
    return Invalid(label, absl::StrCat("JSON error: ", e.what()));
  }
}

}  // namespace xserv::safetensors
