// Template: a parsed Jinja2 template (the subset HF chat templates use) and its render entry
// point.
//
// Ownership and threading: Parse() returns an immutable Template; Render() is const, keeps all
// per-render state on its own stack, and may run from any number of threads at once on the
// same Template. Rendering never throws; failures (syntax, undefined values, type errors,
// raise_exception(), exceeded limits) come back as absl::Status with the template line and
// column.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat_template/value.h"

namespace xserv::chat_template {

struct Stmt;

// Environment options; the defaults are those transformers uses for chat templates
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)).
struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Bounds a render so a hostile or broken template cannot hang the router or exhaust memory.
struct RenderLimits {
  size_t max_output_bytes = 16u << 20;  // also caps every string the template builds
  uint64_t max_steps = 20'000'000;      // statements + expression nodes evaluated
  int max_call_depth = 64;              // nested macro calls
};

struct RenderOptions {
  RenderLimits limits;
  // Clock behind strftime_now(); returns broken-down local time. Unset: the system clock.
  std::function<std::tm()> now;
};

class Template {
 public:
  static absl::StatusOr<std::shared_ptr<const Template>> Parse(std::string_view source,
                                                               const TemplateOptions& options = {});
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with `variables` (a dict Value: name -> value) as the template's top-level names.
  absl::StatusOr<std::string> Render(const Value& variables,
                                     const RenderOptions& options = {}) const;

 private:
  struct Impl;
  explicit Template(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xserv::chat_template
