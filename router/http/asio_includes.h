// The one place xserv includes Boost.Asio/Beast (Boost 1.74, header-only).
//
// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>; GCC 12's
// libstdc++ no longer pulls it in transitively, so it is included first here. Include this header
// instead of <boost/asio.hpp> / <boost/beast/...> anywhere in router/http and its users.
// Boost 1.74 has no as_tuple, no cancellation slots and no experimental::channel: completion
// errors are taken with redirect_error, cancellation is done by closing/cancelling the socket or
// timer, and AsyncQueue (async_queue.h) stands in for channels.
#pragma once

#include <utility>  // NOLINT: must precede Boost.Asio, see above.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
