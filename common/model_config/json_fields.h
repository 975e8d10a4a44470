// Typed, exception-free access to the fields of a parsed JSON object (HF config files).
//
// The module's one adapter over nlohmann::json: ParseJsonObject never throws, and a JsonFields
// only reads values whose type it has checked. A JsonFields borrows the json it wraps, which
// must outlive it. Not synchronised; use from one thread (configs are parsed at start-up).
//
// JSON null counts as absent, because transformers writes None as null ("rope_scaling": null).
// Errors are InvalidArgument "<label>: field \"<path>\": ...".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace xserv::config_json {

// InvalidArgument naming `label` when `text` is not JSON or not an object.
absl::StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, std::string_view label);

class JsonFields {
 public:
  // `json` must be an object. `prefix` is prepended to key names in errors ("rope_scaling.").
  JsonFields(const nlohmann::json& json, std::string label, std::string prefix = "");

  // Present and not null.
  bool Has(std::string_view key) const;
  // Present with a null value.
  bool IsNull(std::string_view key) const;
  // The first of `keys` that Has(), or nullopt; for renamed fields (n_embd / hidden_size).
  std::optional<std::string> FirstPresent(std::initializer_list<std::string_view> keys) const;

  // Integers accept integral JSON floats (4096.0) within int64.
  absl::StatusOr<std::optional<int64_t>> Int(std::string_view key) const;
  absl::StatusOr<int64_t> RequiredInt(std::string_view key) const;
  absl::StatusOr<int64_t> IntOr(std::string_view key, int64_t fallback) const;
  absl::StatusOr<std::optional<double>> Number(std::string_view key) const;
  absl::StatusOr<double> NumberOr(std::string_view key, double fallback) const;
  absl::StatusOr<std::optional<bool>> Bool(std::string_view key) const;
  absl::StatusOr<bool> BoolOr(std::string_view key, bool fallback) const;
  absl::StatusOr<std::optional<std::string>> String(std::string_view key) const;
  // An int or a list of ints (eos_token_id).
  absl::StatusOr<std::optional<std::vector<int64_t>>> IntOrIntList(std::string_view key) const;
  absl::StatusOr<std::optional<std::vector<int64_t>>> IntList(std::string_view key) const;
  absl::StatusOr<std::optional<std::vector<std::string>>> StringList(std::string_view key) const;
  // A nested object, wrapped with the key added to the error prefix.
  absl::StatusOr<std::optional<JsonFields>> Object(std::string_view key) const;

  // InvalidArgument "<label>: field \"<prefix><key>\": <what>"; for callers' own checks.
  absl::Status FieldError(std::string_view key, std::string_view what) const;
  const std::string& label() const { return label_; }

 private:
  const nlohmann::json* Find(std::string_view key) const;  // nullptr when absent or null
  absl::StatusOr<int64_t> ToInt(std::string_view key, const nlohmann::json& value) const;

  const nlohmann::json* json_;
  std::string label_;
  std::string prefix_;
};

}  // namespace xserv::config_json
