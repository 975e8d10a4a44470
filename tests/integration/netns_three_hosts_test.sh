#!/usr/bin/env bash
# Three hosts in network namespaces this test creates itself: host A (10.77.0.1, the router)
# bridges veth pairs to hosts B (10.77.0.2) and C (10.77.0.3), which run the two ranks of one TP=2
# replica (Gloo between them, rendezvous through B's Rendezvous RPC). Nothing outside
# 10.77.0.0/24 exists inside, so nothing else can be contacted. The replica's greedy completion
# must equal a single-rank worker's on the same model.
# Usage: netns_three_hosts_test.sh BIN_DIR SOURCE_DIR    (exit 77 = skipped)
set -uo pipefail
BIN=$1
SRC=$2
if [[ ${XSERV_IN_NETNS:-} != 1 ]]; then
  [[ -f $SRC/.assets/tokenizers/qwen3/tokenizer.json ]] || { echo "SKIP: no Qwen3 tokenizer"; exit 77; }
  unshare -rn true 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; exit 77; }
  command -v ip >/dev/null || { echo "SKIP: iproute2 missing"; exit 77; }
  XSERV_IN_NETNS=1 exec unshare -rn "$0" "$@"
fi

work=$(mktemp -d)
pids=()
# SIGKILL: nothing here needs a graceful drain, and a draining TP rank would outlive the test.
cleanup() { kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

"$BIN/xserv-make-model" --arch qwen3 --preset tiny --seed 5 --tokenizer "$SRC/.assets/tokenizers/qwen3" \
  --out "$work/model" --log-level warn || fail "make-model"

# Host A is this namespace; B and C are child namespaces held open by a sleeping process.
ip link set lo up
ip link add br0 type bridge && ip addr add 10.77.0.1/24 dev br0 && ip link set br0 up || fail "bridge"
declare -A host_pid
octet=2
for h in b c; do
  unshare -n sleep 600 &
  host_pid[$h]=$!
  pids+=($!)
  sleep 0.2
  ip link add "veth-$h" type veth peer name eth0 netns "${host_pid[$h]}" || fail "veth $h"
  ip link set "veth-$h" master br0 up
  nsenter -t "${host_pid[$h]}" -n sh -c \
    "ip link set lo up && ip addr add 10.77.0.$octet/24 dev eth0 && ip link set eth0 up" || fail "addr $h"
  octet=$((octet + 1))
done
# Runs a command in host H's network namespace. exec: started with &, the background job is the
# command itself, so $! is its pid and the cleanup kills it (not just a wrapping subshell).
on() { local h=$1; shift; exec nsenter -t "${host_pid[$h]}" -n "$@"; }

common=(--model "$work/model" --num-kv-blocks 64 --swap-space-gb 0 --threads 1 --log-level info)
on b "$BIN/xserv-worker" "${common[@]}" --host 10.77.0.2 --port 50100 --tp-size 2 --tp-rank 0 \
  --replica-epoch 1 >"$work/rank0.log" 2>&1 &
pids+=($!)
on c "$BIN/xserv-worker" "${common[@]}" --host 10.77.0.3 --port 50101 --tp-size 2 --tp-rank 1 \
  --leader-address 10.77.0.2:50100 --replica-epoch 1 >"$work/rank1.log" 2>&1 &
pids+=($!)
"$BIN/xserv-router" --model "$work/model" --workers 10.77.0.2:50100 --host 10.77.0.1 \
  --http-port 18080 --grpc-port 0 >"$work/router.log" 2>&1 &
pids+=($!)
# The reference: one rank on host A's loopback, same model.
"$BIN/xserv-worker" "${common[@]}" --host 127.0.0.1 --port 50200 >"$work/single.log" 2>&1 &
pids+=($!)
"$BIN/xserv-router" --model "$work/model" --workers 127.0.0.1:50200 --host 127.0.0.1 \
  --http-port 18081 --grpc-port 0 >"$work/router-single.log" 2>&1 &
pids+=($!)

for url in http://10.77.0.1:18080 http://127.0.0.1:18081; do
  for _ in $(seq 300); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/ready") == 200 ]] && break
    sleep 0.2
  done
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/ready") == 200 ]] || fail "$url not ready"
done
grep -q "following the leader" "$work/rank1.log" || fail "rank 1 did not join"

body='{"prompt": [9707, 11, 1879, 0, 3555, 374], "max_tokens": 16, "temperature": 0,
       "ignore_eos": true, "logprobs": 1, "return_tokens_as_token_ids": true}'
split=$(curl -s -H 'Content-Type: application/json' -d "$body" http://10.77.0.1:18080/v1/completions)
single=$(curl -s -H 'Content-Type: application/json' -d "$body" http://127.0.0.1:18081/v1/completions)
python3 - "$split" "$single" <<'PY' || fail "outputs differ"
import json, sys
a, b = (json.loads(x)["choices"][0]["logprobs"] for x in sys.argv[1:3])
assert len(a["tokens"]) == 16, a
assert a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
worst = max(abs(x - y) for x, y in zip(a["token_logprobs"], b["token_logprobs"]))
assert worst < 1e-3, worst
print(f"TP=2 across hosts B and C == single rank: 16 tokens, worst logprob diff {worst:.2e}")
PY
echo "PASS"
