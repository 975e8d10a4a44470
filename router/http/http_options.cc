#include "router/http/http_options.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace xserv::http {

absl::Status HttpServerOptions::Validate() const {
  if (host.empty()) return absl::InvalidArgumentError("http: host is empty");
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("http: port out of range: ", port));
  }
  if (threads < 1 || threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("http: threads must be in [1, 256]: ", threads));
  }
  if (max_body_bytes == 0) return absl::InvalidArgumentError("http: max_body_bytes is 0");
  if (max_header_bytes < 256) {
    return absl::InvalidArgumentError("http: max_header_bytes must be at least 256");
  }
  if (max_connections == 0) return absl::InvalidArgumentError("http: max_connections is 0");
  if (read_timeout.count() <= 0 || idle_timeout.count() <= 0 || write_timeout.count() <= 0) {
    return absl::InvalidArgumentError("http: read/idle/write timeouts must be positive");
  }
  if (sse_ping_interval.count() < 0 || stop_grace.count() < 0) {
    return absl::InvalidArgumentError("http: sse_ping_interval and stop_grace must be >= 0");
  }
  if (listen_backlog < 1) return absl::InvalidArgumentError("http: listen_backlog must be >= 1");
  return absl::OkStatus();
}

}  // namespace xserv::http
