// The SVG chart of an xserv-bench sweep: output throughput against TPOT p50, one labelled point
// per level, joined in sweep order. Pure.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace xserv::tools {

// `levels`: the per-level metrics (output_tok_s, tpot_ms_p50 and `label_key` in each).
std::string Chart(const nlohmann::json& levels, const std::string& label_key);

}  // namespace xserv::tools
