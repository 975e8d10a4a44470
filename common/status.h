// Status helpers shared by every module: early-return macros for absl::Status /
// absl::StatusOr and an invariant check that aborts with file and line.
//
// Functions that can fail return absl::Status or absl::StatusOr<T>; bugs (broken invariants)
// abort through XSERV_CHECK instead, because continuing on corrupted state is worse than dying.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define XSERV_STATUS_CONCAT_INNER_(a, b) a##b
#define XSERV_STATUS_CONCAT_(a, b) XSERV_STATUS_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    ::absl::Status xserv_status_ = ::xserv::ToStatus((expr));   \
    if (!xserv_status_.ok()) return xserv_status_;              \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns `x` from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  XSERV_ASSIGN_OR_RETURN_IMPL_(XSERV_STATUS_CONCAT_(xserv_statusor_, __LINE__), lhs, expr)
#define XSERV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

// Aborts with file and line when `cond` is false. For invariants only, never for bad input.
#define XSERV_CHECK(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) ::xserv::internal::CheckFailed(__FILE__, __LINE__, #cond);                \
  } while (false)

namespace xserv {

inline absl::Status ToStatus(absl::Status s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition);
}  // namespace internal

}  // namespace xserv
