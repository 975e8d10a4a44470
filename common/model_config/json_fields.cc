#include "common/model_config/json_fields.h"

#include <cmath>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::config_json {
namespace {

using Json = nlohmann::json;

std::string TypeName(const Json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();
}

}  // namespace

absl::StatusOr<Json> ParseJsonObject(std::string_view text, std::string_view label) {
  try {
    Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": not valid JSON"));
    }
    if (!json.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(label), ": not a JSON object (", json.type_name(), ")"));
    }
    return json;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": JSON error: ", e.what()));
  }
}

JsonFields::JsonFields(const Json& json, std::string label, std::string prefix)
    : json_(&json), label_(std::move(label)), prefix_(std::move(prefix)) {}

const Json* JsonFields::Find(std::string_view key) const {
  const auto it = json_->find(key);
  if (it == json_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::Has(std::string_view key) const { return Find(key) != nullptr; }

bool JsonFields::IsNull(std::string_view key) const {
  const auto it = json_->find(key);
  return it != json_->end() && it->is_null();
}

std::optional<std::string> JsonFields::FirstPresent(
    std::initializer_list<std::string_view> keys) const {
  for (std::string_view key : keys) {
    if (Has(key)) return std::string(key);
  }
  return std::nullopt;
}

absl::Status JsonFields::FieldError(std::string_view key, std::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat(label_, ": field \"", prefix_, std::string(key), "\": ", std::string(what)));
}

absl::StatusOr<int64_t> JsonFields::ToInt(std::string_view key, const Json& value) const {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return FieldError(key, "integer out of range");
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double v = value.get<double>();
    // 2^63 is the first double above INT64_MAX.
    if (std::isfinite(v) && std::trunc(v) == v && v >= -9.2233720368547758e18 &&
        v < 9.2233720368547758e18) {
      return static_cast<int64_t>(v);
    }
    return FieldError(key, absl::StrCat("expected an integer, got ", value.dump()));
  }
  return FieldError(key, absl::StrCat("expected an integer, got ", TypeName(value)));
}

absl::StatusOr<std::optional<int64_t>> JsonFields::Int(std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t v, ToInt(key, *value));
  return std::optional<int64_t>(v);
}

absl::StatusOr<int64_t> JsonFields::RequiredInt(std::string_view key) const {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, Int(key));
  if (!v.has_value()) return FieldError(key, "required but missing");
  return *v;
}

absl::StatusOr<int64_t> JsonFields::IntOr(std::string_view key, int64_t fallback) const {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, Int(key));
  return v.value_or(fallback);
}

absl::StatusOr<std::optional<double>> JsonFields::Number(std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<double>();
  if (!value->is_number()) {
    return FieldError(key, absl::StrCat("expected a number, got ", TypeName(*value)));
  }
  return std::optional<double>(value->get<double>());
}

absl::StatusOr<double> JsonFields::NumberOr(std::string_view key, double fallback) const {
  ASSIGN_OR_RETURN(std::optional<double> v, Number(key));
  return v.value_or(fallback);
}

absl::StatusOr<std::optional<bool>> JsonFields::Bool(std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<bool>();
  if (!value->is_boolean()) {
    return FieldError(key, absl::StrCat("expected true or false, got ", TypeName(*value)));
  }
  return std::optional<bool>(value->get<bool>());
}

absl::StatusOr<bool> JsonFields::BoolOr(std::string_view key, bool fallback) const {
  ASSIGN_OR_RETURN(std::optional<bool> v, Bool(key));
  return v.value_or(fallback);
}

absl::StatusOr<std::optional<std::string>> JsonFields::String(std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) {
    return FieldError(key, absl::StrCat("expected a string, got ", TypeName(*value)));
  }
  return std::optional<std::string>(value->get<std::string>());
}

absl::StatusOr<std::optional<std::vector<int64_t>>> JsonFields::IntOrIntList(
    std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<std::vector<int64_t>>();
  if (!value->is_array()) {
    ASSIGN_OR_RETURN(int64_t v, ToInt(key, *value));
    return std::optional<std::vector<int64_t>>(std::vector<int64_t>{v});
  }
  return IntList(key);
}

absl::StatusOr<std::optional<std::vector<int64_t>>> JsonFields::IntList(
    std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<std::vector<int64_t>>();
  if (!value->is_array()) {
    return FieldError(key, absl::StrCat("expected a list of integers, got ", TypeName(*value)));
  }
  std::vector<int64_t> out;
  for (const Json& item : *value) {
    ASSIGN_OR_RETURN(int64_t v, ToInt(key, item));
    out.push_back(v);
  }
  return std::optional<std::vector<int64_t>>(std::move(out));
}

absl::StatusOr<std::optional<std::vector<std::string>>> JsonFields::StringList(
    std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<std::vector<std::string>>();
  if (!value->is_array()) {
    return FieldError(key, absl::StrCat("expected a list of strings, got ", TypeName(*value)));
  }
  std::vector<std::string> out;
  for (const Json& item : *value) {
    if (!item.is_string()) {
      return FieldError(key, absl::StrCat("expected a list of strings, found ", TypeName(item)));
    }
    out.push_back(item.get<std::string>());
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

absl::StatusOr<std::optional<JsonFields>> JsonFields::Object(std::string_view key) const {
  const Json* value = Find(key);
  if (value == nullptr) return std::optional<JsonFields>();
  if (!value->is_object()) {
    return FieldError(key, absl::StrCat("expected an object, got ", TypeName(*value)));
  }
  return std::optional<JsonFields>(
      JsonFields(*value, label_, absl::StrCat(prefix_, std::string(key), ".")));
}

}  // namespace xserv::config_json
