#include "worker/service/rendezvous_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xserv::worker {

absl::Status RendezvousStore::CheckEpoch(uint64_t epoch) const {
  if (epoch == epoch_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("rendezvous epoch ", epoch,
                                                    " is not the replica's current epoch ",
                                                    epoch_));
}

absl::Status RendezvousStore::Set(uint64_t epoch, const std::string& key, std::string value) {
  if (auto s = CheckEpoch(epoch); !s.ok()) return s;
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key must not be empty");
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = std::move(value);
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(
    uint64_t epoch, const std::vector<std::string>& keys,
    std::chrono::steady_clock::time_point deadline) {
  if (auto s = CheckEpoch(epoch); !s.ok()) return s;
  std::unique_lock<std::mutex> lock(mu_);
  auto all_present = [&] {
    for (const std::string& k : keys) {
      if (!values_.contains(k)) return false;
    }
    return true;
  };
  changed_.wait_until(lock, deadline, [&] { return shutdown_ || all_present(); });
  if (shutdown_) return absl::CancelledError("rendezvous store shut down");
  if (!all_present()) {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (!values_.contains(k)) missing.push_back(k);
    }
    return absl::DeadlineExceededError(absl::StrCat("rendezvous keys not set before the deadline: ",
                                                    absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> values;
  for (const std::string& k : keys) values.push_back(values_.at(k));
  return values;
}

void RendezvousStore::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  changed_.notify_all();
}

}  // namespace xserv::worker
