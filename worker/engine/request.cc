#include "worker/engine/request.h"

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace xserv::engine {

std::string_view RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kWaiting: return "waiting";
    case RequestState::kPrefilling: return "prefilling";
    case RequestState::kDecoding: return "decoding";
    case RequestState::kPreemptedSwapped: return "preempted_swapped";
    case RequestState::kPreemptedRecompute: return "preempted_recompute";
    case RequestState::kFinished: return "finished";
  }
  return "?";
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {

bool IsLegal(RequestState from, RequestState to) {
  using S = RequestState;
  if (from == S::kFinished) return false;
  if (to == S::kFinished) return true;
  switch (from) {
    case S::kWaiting:
    case S::kPreemptedSwapped:
    case S::kPreemptedRecompute:
      return to == S::kPrefilling || to == S::kDecoding;
    case S::kPrefilling:
      return to == S::kDecoding || to == S::kPreemptedSwapped || to == S::kPreemptedRecompute;
    case S::kDecoding:
      return to == S::kPreemptedSwapped || to == S::kPreemptedRecompute;
    case S::kFinished:
      return false;
  }
  return false;
}

}  // namespace

void TransitionState(Request& request, RequestState to) {
  if (!IsLegal(request.state, to)) {
    spdlog::critical("request {}: illegal transition {} -> {}", request.spec.id,
                     RequestStateName(request.state), RequestStateName(to));
    XSERV_CHECK(false && "illegal request state transition");
  }
  spdlog::debug("request {}: {} -> {}", request.spec.id, RequestStateName(request.state),
                RequestStateName(to));
  request.state = to;
}

}  // namespace xserv::engine
