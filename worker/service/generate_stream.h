// GenerateStream: one Worker.Generate call. It is the request's OutputSink for the engine and owns
// the gRPC write reactor's outbox: one write in flight at a time, later tokens coalesced into the
// next delta, the Finished message last, then Finish(OK).
//
// Threads: the engine-loop thread calls OnTokens/OnFinished; gRPC threads call the reactor's
// reactions. All state is under mu_, and no gRPC call is made while holding it. The engine and the
// reactor each hold a shared_ptr, so whichever lets go last frees the stream; a stream whose
// reactor is done silently drops late engine output.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include <grpcpp/grpcpp.h>

#include "worker/engine/engine.h"
#include "worker/engine/output_sink.h"
#include "xserv/worker/v1/worker.pb.h"

namespace xserv::worker {

class GenerateStream final : public engine::OutputSink,
                             public std::enable_shared_from_this<GenerateStream> {
 public:
  // Validates and submits the request; returns the reactor gRPC drives (it finishes at once with
  // the error status when the request is refused).
  static grpc::ServerWriteReactor<xserv::worker::v1::GenerateResponse>* Start(
      engine::Engine& engine, const xserv::worker::v1::GenerateRequest& request);

  void OnTokens(std::vector<engine::TokenOutput> tokens,
                std::vector<sampling::PositionLogprobs> prompt_logprobs) override;
  void OnFinished(const engine::FinishInfo& info) override;

 private:
  class Reactor;
  explicit GenerateStream(engine::Engine& engine, std::string request_id)
      : engine_(engine), request_id_(std::move(request_id)) {}

  void Pump();                  // starts the next write or the Finish, if any is due
  void WriteDone(bool ok);      // reactor: OnWriteDone
  void Cancelled();             // reactor: OnCancel, or a failed write
  void Detach();                // reactor: OnDone

  engine::Engine& engine_;
  const std::string request_id_;
  std::mutex mu_;
  Reactor* reactor_ = nullptr;
  xserv::worker::v1::TokenDelta pending_;
  bool has_pending_ = false;
  std::optional<xserv::worker::v1::Finished> finished_;
  xserv::worker::v1::GenerateResponse current_;  // the message of the write in flight
  bool in_flight_ = false;
  bool finished_written_ = false;
  bool finish_called_ = false;
  bool cancelled_ = false;
};

}  // namespace xserv::worker
