#!/usr/bin/env bash
# The docker compose smoke test (CI): builds the CPU image, starts the cpu profile of
# deploy/docker-compose.yml (router + workers on host networking, loopback traffic only), checks
# a non-streaming and a streaming chat completion and /metrics through the router, kills the
# worker process inside the workers container and waits for the supervisor to bring the replica
# back, then takes everything down.
#
# Installs docker.io and docker-compose from Debian when missing and starts a dockerd when none
# answers (stopped again at the end); if that daemon does not come up, once more without
# iptables, bridge or overlayfs (every container here is on the host network). Before anything
# is built, a one-binary container must run; a machine where no engine starts or no container
# runs skips the test (exit 77) with the reason. Docker Hub is not reachable here, so the
# debian:bookworm base image is made with debootstrap from Debian's archive when it is not
# present.
# Environment: XSERV_HTTP_PORT (default 18480), XSERV_GRPC_PORT (18481), XSERV_WORKER_PORT (18500);
# SKIP_BUILD=1 uses an xserv:cpu image already there (iterating on the compose file);
# DOCKERD_FLAGS sets the first daemon's flags (e.g. the fallback's, to test that path here).
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

compose=(docker-compose -f deploy/docker-compose.yml --profile cpu)
started_dockerd=""
cleanup() {
  if docker info >/dev/null 2>&1; then
    "${compose[@]}" logs --no-color >/tmp/compose-smoke-services.log 2>&1 || true
    "${compose[@]}" down --timeout 20 >/dev/null 2>&1 || true
  fi
  if [[ -n $started_dockerd ]]; then $SUDO kill "$started_dockerd" 2>/dev/null || true; fi
}
trap cleanup EXIT

# start_dockerd FLAGS...: a daemon of our own; fails (and leaves none) if it does not answer.
start_dockerd() {
  $SUDO /usr/sbin/dockerd "$@" >>/tmp/compose-smoke-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return 0
    $SUDO kill -0 "$started_dockerd" 2>/dev/null || break
    sleep 1
  done
  $SUDO kill "$started_dockerd" 2>/dev/null || true
  wait "$started_dockerd" 2>/dev/null || true
  $SUDO rm -f /var/run/docker.pid
  started_dockerd=""
  return 1
}
skip() {  # exit 77: the smoke test cannot say anything on this machine
  tail -5 /tmp/compose-smoke-dockerd.log 2>/dev/null
  log "SKIPPED: $*"
  exit 77
}

if ! docker info >/dev/null 2>&1; then
  : >/tmp/compose-smoke-dockerd.log
  # DOCKERD_FLAGS: the first try's flags (e.g. the fallback's, to test it on a full machine).
  log "starting dockerd ${DOCKERD_FLAGS:-}"
  # shellcheck disable=SC2086
  if ! start_dockerd ${DOCKERD_FLAGS:-}; then
    # Nested or unprivileged machines often refuse the daemon's iptables chains, its bridge or
    # overlayfs. Every container here uses host networking, so none of them is needed.
    log "dockerd did not start; retrying without iptables and bridge, on vfs storage"
    start_dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=vfs ||
      skip "no Docker engine can run on this machine"
  fi
fi

# Can this engine run a container at all (namespaces, cgroups)? A one-file image of /bin/true
# with its loader and libc, run on the host network as a non-root user (as the image's are).
probe_root=$(mktemp -d)
chmod 755 "$probe_root"
for f in /usr/bin/true $(ldd /usr/bin/true | grep -o '/[^ ]*'); do
  mkdir -p "$probe_root$(dirname "$f")"
  cp -L "$f" "$probe_root$f"
done
if ! tar -C "$probe_root" -c . | docker import - xserv-compose-probe:latest \
    >/tmp/compose-smoke-probe.log 2>&1; then
  cat /tmp/compose-smoke-probe.log
  skip "the Docker engine here cannot import an image"
fi
rm -rf "$probe_root"
if ! docker run --rm --network host --user 65534 xserv-compose-probe:latest /usr/bin/true \
    >/tmp/compose-smoke-probe.log 2>&1; then
  cat /tmp/compose-smoke-probe.log
  skip "the Docker engine here cannot run a container"
fi
log "engine can run containers"

if ! docker image inspect debian:bookworm >/dev/null 2>&1 &&
   ! timeout 60 docker pull debian:bookworm >/dev/null 2>&1; then
  log "debian:bookworm not pullable: making it with debootstrap"
  rootfs=$(mktemp -d)
  # The tar's "./" entry becomes the image's "/": mktemp's 0700 would lock the image's non-root
  # user out of everything on storage drivers that apply it (vfs does).
  chmod 755 "$rootfs"
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
