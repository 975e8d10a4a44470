#include "router/openai/api_error.h"

#include "nlohmann/json.hpp"

namespace xserv::router {

std::string ApiError::ToJson() const {
  nlohmann::ordered_json body = {{"message", message}, {"type", type}};
  body["param"] = param ? nlohmann::ordered_json(*param) : nlohmann::ordered_json(nullptr);
  body["code"] = code ? nlohmann::ordered_json(*code) : nlohmann::ordered_json(nullptr);
  return nlohmann::ordered_json{{"error", body}}.dump(-1, ' ', false,
                                                      nlohmann::json::error_handler_t::replace);
}

ApiError ApiError::Invalid(std::string message, std::optional<std::string> param) {
  return ApiError{.http_status = 400, .message = std::move(message), .param = std::move(param)};
}

ApiError ApiError::FromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      e.http_status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.code = "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      break;
    case absl::StatusCode::kCancelled:  // the client went away (nginx's "client closed request")
      e.http_status = 499;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

}  // namespace xserv::router
