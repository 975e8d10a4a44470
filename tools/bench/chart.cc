#include "tools/bench/chart.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace xserv::tools {

// Output tok/s (x) against TPOT p50 (y), one labelled point per level, joined in sweep order.
std::string Chart(const nlohmann::json& levels, const std::string& label_key) {
  constexpr double kW = 640, kH = 400, kPad = 60;
  double max_x = 1e-9, max_y = 1e-9;
  for (const nlohmann::json& m : levels) {
    max_x = std::max(max_x, m["output_tok_s"].get<double>());
    max_y = std::max(max_y, m["tpot_ms_p50"].get<double>());
  }
  auto px = [&](double x) { return kPad + x / max_x * (kW - 2 * kPad); };
  auto py = [&](double y) { return kH - kPad - y / max_y * (kH - 2 * kPad); };
  std::string points, marks;
  for (const nlohmann::json& m : levels) {
    const double x = px(m["output_tok_s"].get<double>()), y = py(m["tpot_ms_p50"].get<double>());
    points += absl::StrFormat("%.1f,%.1f ", x, y);
    marks += absl::StrFormat(
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\"/><text x=\"%.1f\" y=\"%.1f\">%s %s</text>\n",
        x, y, x + 6, y - 6, label_key, m[label_key].dump());
  }
  return absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<text x=\"%.0f\" y=\"%.0f\">output tok/s (max %.1f)</text>\n"
      "<text x=\"4\" y=\"%.0f\">TPOT p50 ms (max %.2f)</text>\n"
      "<polyline fill=\"none\" stroke=\"steelblue\" points=\"%s\"/>\n%s</svg>\n",
      kW, kH, kPad, kH - kPad, kW - kPad, kH - kPad, kPad, kPad, kPad, kH - kPad, kW / 2 - 60,
      kH - 20, max_x, kPad - 20, max_y, points, marks);
}

}  // namespace xserv::tools
