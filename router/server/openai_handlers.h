// The router's HTTP surface: OpenAI-compatible endpoints plus health, readiness, tokenizer and
// metrics endpoints, dispatched from one HttpHandler.
//
//   POST /v1/chat/completions   POST /v1/completions   GET /v1/models
//   GET /health (process up)    GET /ready (a replica can serve)   GET /metrics (Prometheus)
//   POST /tokenize  POST /detokenize (vLLM-compatible bodies)
//
// Errors use the OpenAI shape {"error": {"message", "type", "param", "code"}}. With an API key
// configured, everything except /health, /ready and /metrics needs "Authorization: Bearer KEY".
// Thread-safe: the handler is called concurrently for different connections.
#pragma once

#include "router/http/http_responder.h"
#include "router/server/router_state.h"

namespace xserv::router {

http::HttpHandler MakeOpenAiHandler(RouterState& state);

}  // namespace xserv::router
