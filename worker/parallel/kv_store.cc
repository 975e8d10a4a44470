#include "worker/parallel/kv_store.h"

#include "absl/strings/str_cat.h"

namespace xserv::parallel {

absl::Status InMemoryKeyValueStore::Set(const std::string& key, const std::string& value) {
  if (key.empty()) return absl::InvalidArgumentError("key-value store key must not be empty");
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryKeyValueStore::Get(const std::string& key,
                                                       std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_for(lock, timeout, [&] { return values_.contains(key); })) {
    return absl::DeadlineExceededError(
        absl::StrCat("key '", key, "' not set within ", timeout.count(), " ms"));
  }
  return values_.at(key);
}

}  // namespace xserv::parallel
