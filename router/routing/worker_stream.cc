#include "router/routing/worker_stream.h"

namespace xserv::router {

namespace wv1 = xserv::worker::v1;

class WorkerStreamReactor final : public grpc::ClientReadReactor<wv1::GenerateResponse> {
 public:
  WorkerStreamReactor(std::shared_ptr<WorkerStreamHandle> handle, wv1::GenerateRequest request,
                      WorkerStream::Callback callback)
      : handle_(std::move(handle)), request_(std::move(request)), callback_(std::move(callback)) {}

  grpc::ClientContext& context() { return context_; }
  const wv1::GenerateRequest& request() const { return request_; }

  void Begin() {
    StartRead(&message_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone brings the status
    WorkerEvent event;
    if (message_.has_delta()) {
      event.kind = WorkerEvent::Kind::kDelta;
      event.delta = std::move(*message_.mutable_delta());
    } else {
      event.kind = WorkerEvent::Kind::kFinished;
      event.finished = std::move(*message_.mutable_finished());
    }
    callback_(std::move(event));
    StartRead(&message_);
  }

  void OnDone(const grpc::Status& status) override;

  std::shared_ptr<WorkerStreamHandle> handle_;

 private:
  grpc::ClientContext context_;
  wv1::GenerateRequest request_;
  wv1::GenerateResponse message_;
  WorkerStream::Callback callback_;
};

void WorkerStreamHandle::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (context_ != nullptr) context_->TryCancel();
}

void WorkerStreamReactor::OnDone(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(handle_->mu_);
    handle_->context_ = nullptr;  // Cancel() is inert from now on
  }
  WorkerEvent event;
  event.kind = WorkerEvent::Kind::kClosed;
  event.status = status;
  callback_(std::move(event));
  delete this;
}

std::shared_ptr<WorkerStreamHandle> WorkerStream::Start(wv1::Worker::Stub& stub,
                                                        wv1::GenerateRequest request,
                                                        std::chrono::milliseconds timeout,
                                                        Callback callback) {
  auto handle = std::make_shared<WorkerStreamHandle>();
  auto* reactor = new WorkerStreamReactor(handle, std::move(request), std::move(callback));
  reactor->context().set_deadline(std::chrono::system_clock::now() + timeout);
  {
    std::lock_guard<std::mutex> lock(handle->mu_);
    handle->context_ = &reactor->context();
  }
  stub.async()->Generate(&reactor->context(), &reactor->request(), reactor);
  reactor->Begin();
  return handle;
}

}  // namespace xserv::router
