// WorkerStream: one client-side Worker.Generate call, driven by gRPC's callback API. Events (a
// token delta, the final Finished message, or the stream's end status) are handed to a callback
// on a gRPC thread; the callback must not block (the router pushes them into the HTTP
// connection's queue).
//
// Lifetime: created with Start(); deletes itself after the stream is done and the final status
// was delivered. Cancel() may be called from any thread until then (client disconnect, router
// shutdown); it is safe to call after completion only through the shared handle, which becomes
// inert once the stream is done.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>

#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::router {

struct WorkerEvent {
  enum class Kind { kDelta, kFinished, kClosed };
  Kind kind = Kind::kClosed;
  xserv::worker::v1::TokenDelta delta;   // kDelta
  xserv::worker::v1::Finished finished;  // kFinished
  grpc::Status status;                   // kClosed: the RPC's final status
};

class WorkerStreamReactor;

// Cancels the stream it was returned for; inert after the stream is done.
class WorkerStreamHandle {
 public:
  void Cancel();

 private:
  friend class WorkerStream;
  friend class WorkerStreamReactor;
  std::mutex mu_;
  grpc::ClientContext* context_ = nullptr;  // null once done
};

class WorkerStream {
 public:
  using Callback = std::function<void(WorkerEvent)>;
  static std::shared_ptr<WorkerStreamHandle> Start(xserv::worker::v1::Worker::Stub& stub,
                                                   xserv::worker::v1::GenerateRequest request,
                                                   std::chrono::milliseconds timeout,
                                                   Callback callback);
};

}  // namespace xserv::router
