#include "worker/parallel/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/parallel/gloo_adapters.h"

namespace xserv::parallel {
namespace {

// Gloo's TCP device checks getaddrinfo's result only against -1 and then walks an uninitialised
// list when a name does not resolve (it crashed with SIGSEGV in tests), so names are checked
// here first.
absl::Status CheckResolvable(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "' to bind to: ", gai_strerror(rv)));
  }
  freeaddrinfo(result);
  return absl::OkStatus();
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);
// gloo::sum / gloo::max are overloaded (2- and 4-argument forms); the cast picks the 4-argument
// form that AllreduceOptions::setReduceFunction expects.
const ReduceFn kSumFloat = static_cast<ReduceFn>(&gloo::sum<float>);
const ReduceFn kMaxFloat = static_cast<ReduceFn>(&gloo::max<float>);

// Gloo's collectives use slots (prefix << 56 | tag << 24) with prefixes 0x01..0x08 (gloo/types.h);
// point-to-point messages get a prefix of their own so a user tag can never collide with them.
constexpr uint64_t kP2PSlotPrefix = uint64_t{0xF0} << 56;

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::Context> context)
      : context_(std::move(context)) {}

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }

  absl::Status AllReduce(std::span<float> data, ReduceOp op) override {
    const uint32_t tag = next_tag_++;
    return Run("AllReduce", [&] {
      if (data.empty()) return absl::OkStatus();
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.data(), data.size());  // no input: in place
      opts.setReduceFunction(op == ReduceOp::kSum ? kSumFloat : kMaxFloat);
      opts.setTag(tag);
      gloo::allreduce(opts);
      return absl::OkStatus();
    });
  }

  absl::Status AllGather(std::span<const float> send, std::span<float> recv) override {
    const size_t n = send.size();
    if (recv.size() != n * world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("AllGather: recv has ", recv.size(),
                                                     " elements, expected ", n * world_size()));
    }
    const bool in_place = send.data() == recv.data() + n * rank();
    const auto lo = reinterpret_cast<uintptr_t>(recv.data());
    const auto hi = reinterpret_cast<uintptr_t>(recv.data() + recv.size());
    const auto s = reinterpret_cast<uintptr_t>(send.data());
    if (!in_place && n > 0 && s < hi && s + n * sizeof(float) > lo) {
      return absl::InvalidArgumentError("AllGather: send overlaps recv but is not its own slot");
    }
    const uint32_t tag = next_tag_++;
    return Run("AllGather", [&] {
      if (n == 0) return absl::OkStatus();
      gloo::AllgatherOptions opts(context_);
      // Gloo takes non-const pointers but only reads the input. Without an input, Gloo expects
      // this rank's contribution already in its slot of the output.
      if (!in_place) opts.setInput(const_cast<float*>(send.data()), n);
      opts.setOutput(recv.data(), recv.size());
      opts.setTag(tag);
      gloo::allgather(opts);
      return absl::OkStatus();
    });
  }

  absl::Status Broadcast(std::span<std::byte> data, int root) override {
    if (root < 0 || root >= world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("Broadcast: bad root ", root));
    }
    const uint32_t tag = next_tag_++;
    return Run("Broadcast", [&] {
      if (data.empty()) return absl::OkStatus();
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data.data(), data.size());  // the root sends its output buffer: in place
      opts.setRoot(root);
      opts.setTag(tag);
      gloo::broadcast(opts);
      return absl::OkStatus();
    });
  }

  absl::Status Send(std::span<const std::byte> data, int dst, int tag) override {
    RETURN_IF_ERROR(CheckPeer("Send", dst, tag));
    return Run("Send", [&] {
      if (data.empty()) return absl::OkStatus();  // the peer skips its zero-byte Recv too
      // Gloo only reads a buffer that is sent.
      auto buf = context_->createUnboundBuffer(const_cast<std::byte*>(data.data()), data.size());
      buf->send(dst, kP2PSlotPrefix | static_cast<uint64_t>(tag));
      if (!buf->waitSend(context_->getTimeout())) return absl::AbortedError("send aborted");
      return absl::OkStatus();
    });
  }

  absl::Status Recv(std::span<std::byte> data, int src, int tag) override {
    RETURN_IF_ERROR(CheckPeer("Recv", src, tag));
    return Run("Recv", [&] {
      if (data.empty()) return absl::OkStatus();
      auto buf = context_->createUnboundBuffer(data.data(), data.size());
      buf->recv(src, kP2PSlotPrefix | static_cast<uint64_t>(tag));
      if (!buf->waitRecv(context_->getTimeout())) return absl::AbortedError("recv aborted");
      return absl::OkStatus();
    });
  }

  absl::Status StartSend(std::span<const std::byte> data, int dst, int tag) override {
    RETURN_IF_ERROR(CheckPeer("StartSend", dst, tag));
    return Run("StartSend", [&] {
      if (data.empty()) return absl::OkStatus();
      auto buf = context_->createUnboundBuffer(const_cast<std::byte*>(data.data()), data.size());
      buf->send(dst, kP2PSlotPrefix | static_cast<uint64_t>(tag));
      pending_sends_.push_back(std::move(buf));
      return absl::OkStatus();
    });
  }

  absl::Status WaitSends(size_t max_pending) override {
    return Run("WaitSends", [&] {
      while (pending_sends_.size() > max_pending) {
        if (!pending_sends_.front()->waitSend(context_->getTimeout())) {
          return absl::AbortedError("send aborted");
        }
        pending_sends_.pop_front();
      }
      return absl::OkStatus();
    });
  }

  absl::Status Barrier() override {
    const uint32_t tag = next_tag_++;
    return Run("Barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      gloo::barrier(opts);
      return absl::OkStatus();
    });
  }

 private:
  absl::Status CheckPeer(absl::string_view op, int peer, int tag) const {
    if (peer < 0 || peer >= world_size() || peer == rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": bad peer ", peer, " (rank ", rank(), " of ", world_size(), ")"));
    }
    if (tag < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": negative tag ", tag));
    return absl::OkStatus();
  }

  // After a failure Gloo's state is unknown (a timed-out receive may still be registered with the
  // transport), so the first error breaks the communicator for good.
  absl::Status Run(absl::string_view op, absl::FunctionRef<absl::Status()> fn) {
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": communicator broken by an earlier error: ", broken_.message()));
    }
    absl::Status status = CallGloo(absl::StrCat(op, " on rank ", rank()), fn);
    if (!status.ok()) broken_ = status;
    return status;
  }

  const std::shared_ptr<gloo::Context> context_;
  // Each collective gets the next tag, the same sequence on every rank (cf. PyTorch's
  // ProcessGroupGloo), so consecutive collectives never share Gloo slots.
  uint32_t next_tag_ = 0;
  absl::Status broken_;
  std::deque<std::unique_ptr<gloo::transport::UnboundBuffer>> pending_sends_;  // StartSend's
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: bad rank ", options.rank, " of world size ", options.world_size));
  }
  if (options.store == nullptr) return absl::InvalidArgumentError("gloo: no key-value store");
  if (options.prefix.empty()) return absl::InvalidArgumentError("gloo: empty key prefix");
  if (options.timeout <= std::chrono::milliseconds::zero()) {
    return absl::InvalidArgumentError("gloo: timeout must be positive");
  }
  gloo::transport::tcp::attr attr;
  if (if_nametoindex(options.interface_or_host.c_str()) != 0) {
    attr.iface = options.interface_or_host;
  } else {
    RETURN_IF_ERROR(CheckResolvable(options.interface_or_host));
    attr.hostname = options.interface_or_host;
  }
  GlooStoreAdapter store(*options.store, options.prefix, options.timeout);
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = CallGloo("rendezvous", [&] {
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(store, device);
    return absl::OkStatus();
  });
  // Gloo only saw an exception from the store; its own status has the real code.
  if (!store.error().ok()) status = store.error();
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("gloo rendezvous of rank ", options.rank, " of ",
                                     options.world_size, " (prefix '", options.prefix, "', ",
                                     options.interface_or_host, "): ", status.message()));
  }
  return std::make_unique<GlooCommunicator>(std::move(context));
}

}  // namespace xserv::parallel
