#!/usr/bin/env bash
# The docker compose smoke test (CI): builds the CPU image, starts the cpu profile of
# deploy/docker-compose.yml (router + workers on host networking, loopback traffic only), checks
# a non-streaming and a streaming chat completion and /metrics through the router, kills the
# worker process inside the workers container and waits for the supervisor to bring the replica
# back, then takes everything down.
#
# Installs docker.io and docker-compose from Debian when missing and starts a dockerd when none
# answers (stopped again at the end). Docker Hub is not reachable here, so the debian:bookworm
# base image is made with debootstrap from Debian's archive when it is not present.
# Environment: XSERV_HTTP_PORT (default 18480), XSERV_GRPC_PORT (18481), XSERV_WORKER_PORT (18500);
# SKIP_BUILD=1 uses an xserv:cpu image already there (iterating on the compose file).
set -euo pipefail
cd "$(dirname "$0")/.."
export XSERV_HTTP_PORT=${XSERV_HTTP_PORT:-18480}
export XSERV_GRPC_PORT=${XSERV_GRPC_PORT:-18481}
export XSERV_WORKER_PORT=${XSERV_WORKER_PORT:-18500}
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
log() { echo "[compose-smoke +$SECONDS s] $*"; }

need=()
command -v dockerd >/dev/null 2>&1 || [[ -x /usr/sbin/dockerd ]] || need+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || need+=(debootstrap)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}" >/dev/null
fi

started_dockerd=""
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  $SUDO /usr/sbin/dockerd >/tmp/compose-smoke-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    # A machine where no Docker engine can run (no privileges for namespaces or cgroups): the
    # smoke test cannot say anything here; exit 77 (skipped) with the daemon's reason.
    tail -5 /tmp/compose-smoke-dockerd.log
    log "SKIPPED: no Docker engine can run on this machine"
    exit 77
  fi
fi

compose=(docker-compose -f deploy/docker-compose.yml --profile cpu)
cleanup() {
  "${compose[@]}" logs --no-color >/tmp/compose-smoke-services.log 2>&1 || true
  "${compose[@]}" down --timeout 20 >/dev/null 2>&1 || true
  if [[ -n $started_dockerd ]]; then $SUDO kill "$started_dockerd" 2>/dev/null || true; fi
}
trap cleanup EXIT

if ! docker image inspect debian:bookworm >/dev/null 2>&1 &&
   ! timeout 60 docker pull debian:bookworm >/dev/null 2>&1; then
  log "debian:bookworm not pullable: making it with debootstrap"
  rootfs=$(mktemp -d)
  $SUDO debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  $SUDO tar -C "$rootfs" -c . | docker import - debian:bookworm >/dev/null
  $SUDO rm -rf "$rootfs"
fi

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/fetch-assets.sh >/dev/null  # the Qwen3 tokenizer the image's demo model uses
  log "building xserv:cpu"
  docker build --network host -q -f deploy/docker/Dockerfile -t xserv:cpu . >/dev/null
fi
log "starting the cpu profile"
"${compose[@]}" up -d

base="http://127.0.0.1:$XSERV_HTTP_PORT"
wait_ready() {
  for _ in $(seq "$1"); do
    curl -fsS "$base/ready" >/dev/null 2>&1 && return 0
    sleep 1
  done
  return 1
}
wait_ready 180 || { log "router never became ready"; exit 1; }
log "ready"

chat='{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}'
reply=$(curl -fsS "$base/v1/chat/completions" -H 'Content-Type: application/json' -d "$chat")
grep -q '"chat.completion"' <<<"$reply" || { log "bad reply: $reply"; exit 1; }
grep -q '"completion_tokens":8' <<<"$reply" || grep -q '"finish_reason":"stop"' <<<"$reply" ||
  { log "no usage / finish in: $reply"; exit 1; }
stream=$(curl -fsSN "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8, "stream": true}')
grep -q '^data: \[DONE\]' <<<"$stream" || { log "stream did not end in [DONE]"; exit 1; }
[[ $(grep -c '^data: {' <<<"$stream") -ge 2 ]] || { log "stream has no chunks"; exit 1; }
# Into a variable first: `curl | grep -q` fails under pipefail once grep quits before curl has
# written everything (it did when the page grew).
metrics=$(curl -fsS "$base/metrics") || { log "GET /metrics failed"; exit 1; }
grep -q '^xserv:' <<<"$metrics" || { log "no xserv: metrics"; exit 1; }
log "chat (plain and streaming) and /metrics through the router: ok"

# A worker dies: the supervisor in the workers container restarts the replica.
"${compose[@]}" exec -T workers-cpu pkill -9 -x xserv-worker
t0=$SECONDS
sleep 1
recovered=""
for _ in $(seq 120); do
  reply=$(curl -fsS "$base/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "$chat" 2>/dev/null) || reply=""
  if grep -q '"chat.completion"' <<<"$reply"; then
    recovered=yes
    break
  fi
  sleep 1
done
[[ -n $recovered ]] || { log "no recovery after killing the worker"; exit 1; }
log "worker killed and serving again after $((SECONDS - t0)) s"
log "PASS"
