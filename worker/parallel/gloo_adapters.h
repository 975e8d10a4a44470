// The two places where Gloo meets the rest of xserv (internal to worker/parallel/):
//   CallGloo          the one translation point from Gloo's exceptions to absl::Status;
//   GlooStoreAdapter  a KeyValueStore seen as the gloo::rendezvous::Store that connectFullMesh
//                     reads and writes, with every key under "<prefix>/".
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/parallel/kv_store.h"

namespace xserv::parallel {

// Runs `fn`, turning anything Gloo throws into a status naming `what`: an IoException that
// reports a timeout becomes DeadlineExceeded, other IoExceptions Unavailable, anything else
// (gloo::Exception, GLOO_ENFORCE's EnforceNotMet, std::exception) Internal.
absl::Status CallGloo(absl::string_view what, absl::FunctionRef<absl::Status()> fn);

// Used by one thread (the rendezvous) for the duration of connectFullMesh.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(KeyValueStore& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The first failure of the underlying store. Gloo only sees it as an exception (its Store
  // interface has no error values), so the caller reports this status with its real code.
  const absl::Status& error() const { return error_; }

 private:
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }
  // Records a failure and throws it into Gloo, which unwinds connectFullMesh.
  void ThrowIfError(absl::Status status);

  KeyValueStore& store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  absl::Status error_;
};

}  // namespace xserv::parallel
