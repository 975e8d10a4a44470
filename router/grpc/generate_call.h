// GenerateCall: one public xserv.v1.Generation/Generate call. A coroutine on the gRPC front end's
// io_context (one strand per call) validates and prepares the request exactly as the HTTP API
// does, takes an admission slot, and drives a GenerationRun (the same choice, retry and finish
// logic as HTTP) whose updates it turns into Chunk messages, then one Complete. The call object
// owns the server write reactor's outbox: one write in flight, later chunks coalesced into the
// next message, Complete after the last chunk, then Finish with the call's status.
//
// Threads: the coroutine runs on the call's strand and is the only user of the GenerationRun
// (run_); gRPC threads run the reactor's reactions (OnWriteDone, OnCancel, OnDone), which never
// block: a client cancel is posted to the strand, which cancels the worker streams. The outbox is
// under mu_; no gRPC call is made while holding it. The coroutine and the reactor each hold a
// shared_ptr; output produced after the reactor is done is dropped.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "router/http/asio_includes.h"
#include "router/server/router_state.h"
#include "xserv/v1/generation.pb.h"

namespace xserv::router {
class GenerationRun;
struct ModelContext;
}  // namespace xserv::router

namespace xserv::router::grpc_api {

class GenerateCall final : public std::enable_shared_from_this<GenerateCall> {
 public:
  // Returns the reactor gRPC drives; the work is spawned on a new strand of `io`. `state` and
  // `io` must outlive the call (the server stops gRPC, then the io_context). `refusal`, when not
  // OK (e.g. Unauthenticated), ends the call with that status before anything else is done.
  static grpc::ServerWriteReactor<xserv::v1::GenerateResponse>* Start(
      RouterState& state, boost::asio::io_context& io, const xserv::v1::GenerateRequest& request,
      const absl::Status& refusal);

 private:
  class Reactor;
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  GenerateCall(RouterState& state, Strand strand, std::string public_id, std::string internal_id)
      : state_(state),
        strand_(std::move(strand)),
        public_id_(std::move(public_id)),
        internal_id_(std::move(internal_id)) {}

  // The coroutine (it holds the call alive): Serve, then Close with its status.
  static boost::asio::awaitable<void> Run(std::shared_ptr<GenerateCall> self,
                                          xserv::v1::GenerateRequest request);
  // Validation, admission, then the run; the call's final status.
  boost::asio::awaitable<absl::Status> Serve(const xserv::v1::GenerateRequest& request);
  // Chunks while the run streams, then Complete; the run's error if it failed.
  boost::asio::awaitable<absl::Status> Stream(GenerationRun& run, const ModelContext& model);

  // Outbox (any thread).
  void AppendChunk(xserv::v1::Chunk chunk);
  void SetComplete(xserv::v1::Complete complete);
  void Close(grpc::Status status);  // after the last chunk / Complete
  bool cancelled();

  void Pump();              // starts the next write or the Finish, if any is due
  void WriteDone(bool ok);  // reactor: OnWriteDone
  void Cancelled();         // reactor: OnCancel, or a failed write
  void Detach();            // reactor: OnDone

  RouterState& state_;
  const Strand strand_;
  const std::string public_id_;    // echoed in every response: the client's id or internal_id_
  const std::string internal_id_;  // unique per call; prefixes the worker request ids
  GenerationRun* run_ = nullptr;   // strand only; set while a run exists

  std::mutex mu_;
  Reactor* reactor_ = nullptr;
  xserv::v1::GenerateResponse pending_;  // chunks coalesced while a write is in flight
  bool has_pending_ = false;
  std::optional<xserv::v1::GenerateResponse> complete_;
  std::optional<grpc::Status> status_;   // set by Close: Finish once the outbox is empty
  xserv::v1::GenerateResponse current_;  // the message of the write in flight
  bool in_flight_ = false;
  bool finish_called_ = false;
  bool cancelled_ = false;
};

}  // namespace xserv::router::grpc_api
