// ApiError: an error as the OpenAI API reports it, and the one place that maps a Status to it.
// Body shape: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace xserv::router {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;
  std::optional<std::string> code;

  std::string ToJson() const;

  static ApiError Invalid(std::string message, std::optional<std::string> param = std::nullopt);
  // Maps a Status from anywhere in the router (or a worker via gRPC) onto HTTP semantics:
  // InvalidArgument/OutOfRange 400, Unauthenticated 401, PermissionDenied 403, NotFound 404,
  // ResourceExhausted 429, Unavailable 503, DeadlineExceeded 504, everything else 500.
  static ApiError FromStatus(const absl::Status& status);
};

}  // namespace xserv::router
