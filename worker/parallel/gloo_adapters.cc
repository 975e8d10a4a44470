#include "worker/parallel/gloo_adapters.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace xserv::parallel {

absl::Status CallGloo(absl::string_view what, absl::FunctionRef<absl::Status()> fn) {
  try {
    return fn();
  } catch (const gloo::IoException& e) {
    // Gloo has no timeout exception type; its timeouts say so in the message ("Timed out
    // waiting ...", "Connect timeout ..."). Only the code depends on this guess.
    const std::string lower = absl::AsciiStrToLower(e.what());
    const std::string message = absl::StrCat("gloo ", what, ": ", e.what());
    if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
      return absl::DeadlineExceededError(message);
    }
    return absl::UnavailableError(message);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo ", what, ": ", e.what()));
  }
}

void GlooStoreAdapter::ThrowIfError(absl::Status status) {
  if (status.ok()) return;
  if (error_.ok()) error_ = status;
  throw gloo::IoException(std::string(status.message()));
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  ThrowIfError(store_.Set(Key(key), std::string(data.begin(), data.end())));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.Get(Key(key), timeout_);
  ThrowIfError(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout here; zero (gloo::kNoTimeout) would mean "forever", which a
  // rendezvous must never do, so it falls back to ours.
  const auto budget = timeout > std::chrono::milliseconds::zero() ? timeout : timeout_;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (const std::string& key : keys) {
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds::zero());
    ThrowIfError(store_.Get(Key(key), left).status());
  }
}

}  // namespace xserv::parallel
