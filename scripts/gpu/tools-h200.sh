#!/usr/bin/env bash
# On the GPU host: our client tools against the whole stack on CUDA, in one call.
#   1. a random Qwen3-8B (transformers, bf16, seed 0, the real Qwen3 tokenizer; as e2e-cuda.sh),
#      reused from MODEL_DIR or from the cache of an earlier call on the same (warm) machine;
#   2. transformers' sliding-window perplexity of a cut of a text on those weights (before the
#      stack takes the GPU): scripts/gpu/hf_perplexity.py;
#   3. the supervisor on the CUDA backend (router + worker), as e2e-cuda.sh starts it;
#   4. xserv-bench through the router: random token ids, INPUT_LEN in / OUTPUT_LEN out
#      (ignore_eos), closed loop at each CONCURRENCY level, one call per level so that each level
#      gets its own request count; merged into one results JSON and the bench's SVG chart;
#   5. xserv-perplexity through the router on the same text, compared with step 2: the relative
#      difference of the mean NLL (log-perplexity) must stay under PPL_MAX_REL_NLL, the tokens
#      scored must agree, and the router's /tokenize must give transformers' token ids;
#   6. the stack stopped, logs packed.
# Writes to $OUT: tools-h200-bench.json, tools-h200-bench.svg, tools-h200-ppl.json,
# tools-h200-summary.txt, tools-h200-logs.tar.gz. Exit status 0 only when every step passed.
#
# Needs in .bundle/: xserv-supervisor, xserv-router, xserv-worker, xserv-bench, xserv-perplexity;
# and the assets (BUNDLE_ASSETS=1 scripts/gpu/bundle.sh): .assets/tokenizers/qwen3, the text.
#
# Environment (defaults):
#   CONCURRENCY=1,16,64,256  INPUT_LEN=128  OUTPUT_LEN=512
#   NUM_PROMPTS_PER_LEVEL=   empty: max(MIN_PROMPTS, 2 x concurrency) capped at MAX_PROMPTS;
#                            one number: every level; a comma list: one per level
#   MIN_PROMPTS=8  MAX_PROMPTS=512  BENCH_WARMUP=2 (before the first level only)
#   BENCH_LEVEL_TIMEOUT_S=240 (per level)
#   PPL_TEXT=.assets/text/moby-dick.txt  PPL_CHARS=20000  PPL_MAX_LENGTH=1024  PPL_STRIDE=512
#   PPL_MAX_REL_NLL=0.01  HF_FP32=1 (also transformers in fp32, the bf16-rounding yardstick; 0: skip)
#   MODEL_DIR= (reuse this HF dir)  MODEL_CACHE=/tmp/xserv-tools-h200
#   PORT=18080  WORKER_BASE_PORT=18100  READY_TIMEOUT_S=600  MAX_MODEL_LEN=4096
#   BATCH_INVARIANT=false  SUPERVISOR_ARGS=  (e.g. "--tp 2 --devices 0,1")
# Usage: bash scripts/gpu/tools-h200.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
export PYTHONUNBUFFERED=1

CONCURRENCY=${CONCURRENCY:-1,16,64,256}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-512}
NUM_PROMPTS_PER_LEVEL=${NUM_PROMPTS_PER_LEVEL:-}
MIN_PROMPTS=${MIN_PROMPTS:-8}
MAX_PROMPTS=${MAX_PROMPTS:-512}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_LEVEL_TIMEOUT_S=${BENCH_LEVEL_TIMEOUT_S:-240}
PPL_TEXT=${PPL_TEXT:-.assets/text/moby-dick.txt}
PPL_CHARS=${PPL_CHARS:-20000}
PPL_MAX_LENGTH=${PPL_MAX_LENGTH:-1024}
PPL_STRIDE=${PPL_STRIDE:-512}
PPL_MAX_REL_NLL=${PPL_MAX_REL_NLL:-0.01}
HF_FP32=${HF_FP32:-1}
MODEL_CACHE=${MODEL_CACHE:-/tmp/xserv-tools-h200}
PORT=${PORT:-18080}
WORKER_BASE_PORT=${WORKER_BASE_PORT:-18100}
READY_TIMEOUT_S=${READY_TIMEOUT_S:-600}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}
BIN=$XSERV_ROOT/.bundle/bin
URL=http://127.0.0.1:$PORT
helper=scripts/gpu/tools_h200.py

t_start=$(date +%s)
work=$(mktemp -d)
logs=$work/logs
mkdir -p "$logs"
summary=$OUT/tools-h200-summary.txt
sup=""
failed=0
finished=0

note() { echo "[tools-h200 +$(($(date +%s) - t_start))s] $*" | tee -a "$summary"; }
fail() { failed=1; note "FAIL: $*"; }

stop_stack() {
  [[ -n $sup ]] || return 0
  local pid=$sup
  sup=""
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      note "supervisor $pid still up after 60 s: killing its process group"
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  fi
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  note "supervisor exit $rc"
  # Anything the supervisor left behind in its own process group (setsid below).
  kill -KILL -- "-$pid" 2>/dev/null || true
}

on_exit() {
  local rc=$?
  set +e
  stop_stack
  ((finished)) || { failed=1; note "FAIL: stopped early (exit $rc)"; }
  [[ -f $logs/serve.log ]] && grep -E "error|ERROR|critical" "$logs/serve.log" | head -5 >"$logs/serve-errors.txt"
  cp "$summary" "$logs/" 2>/dev/null
  tar -C "$work" -czf "$OUT/tools-h200-logs.tar.gz" logs
  note "total $(($(date +%s) - t_start)) s; results in $OUT: $(cd "$OUT" && ls tools-h200-* | tr '\n' ' ')"
  if ((failed)); then note "RESULT: FAIL"; else note "RESULT: PASS"; fi
  rm -rf "$work"
  ((failed)) && exit $((rc ? rc : 1))
  exit 0
}
trap on_exit EXIT
trap 'exit 130' INT TERM

: >"$summary"
note "commit $XSERV_COMMIT, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader | tee -a "$summary" || true

# --- preflight -------------------------------------------------------------------------------
for b in xserv-supervisor xserv-router xserv-worker xserv-bench xserv-perplexity; do
  [[ -x $BIN/$b ]] || { note "missing $BIN/$b (bundle it: scripts/gpu/bundle.sh)"; exit 2; }
done
[[ -f .assets/tokenizers/qwen3/tokenizer.json ]] ||
  { note "missing .assets/tokenizers/qwen3 (BUNDLE_ASSETS=1 scripts/gpu/bundle.sh)"; exit 2; }
[[ -f $PPL_TEXT ]] || { note "missing $PPL_TEXT (BUNDLE_ASSETS=1 scripts/gpu/bundle.sh)"; exit 2; }
IFS=, read -ra levels <<<"$CONCURRENCY"
IFS=, read -ra counts <<<"$NUM_PROMPTS_PER_LEVEL"
if ((${#counts[@]} > 1 && ${#counts[@]} != ${#levels[@]})); then
  note "NUM_PROMPTS_PER_LEVEL has ${#counts[@]} entries for ${#levels[@]} levels"; exit 2
fi

# --- 1. the model ----------------------------------------------------------------------------
if [[ -n ${MODEL_DIR:-} ]]; then
  [[ -f $MODEL_DIR/config.json && -f $MODEL_DIR/tokenizer.json ]] ||
    { note "MODEL_DIR=$MODEL_DIR lacks config.json or tokenizer.json"; exit 2; }
  note "model: reusing $MODEL_DIR"
else
  cache=$MODEL_CACHE/qwen3-8b
  MODEL_DIR=$cache/model
  if [[ -f $cache/.complete ]]; then
    note "model: reusing $MODEL_DIR (made by an earlier call)"
  else
    rm -rf "$cache" && mkdir -p "$cache"
    python3 scripts/gpu/e2e_reference.py --arch qwen3-8b --tokenizer .assets/tokenizers/qwen3 \
      --out "$cache" --model-only >"$logs/model.log" 2>&1 ||
      { tail -5 "$logs/model.log"; note "model creation failed"; exit 1; }
    touch "$cache/.complete"
    note "model: $(tail -1 "$logs/model.log") -> $MODEL_DIR"
  fi
fi

# --- 2. transformers' perplexity on the same weights -------------------------------------------
text=$work/ppl-text.txt
python3 "$helper" cut-text "$PPL_TEXT" "$text" "$PPL_CHARS"
ppl_args=(--model "$MODEL_DIR" --file "$text" --max-length "$PPL_MAX_LENGTH" --stride "$PPL_STRIDE")
hf_ok=1
if python3 scripts/gpu/hf_perplexity.py "${ppl_args[@]}" --dtype bf16 --out "$work/ppl-hf.json" \
     --ids-out "$work/hf-ids.json" >"$logs/ppl-hf.log" 2>&1; then
  note "transformers bf16: $(cat "$work/ppl-hf.json")"
else
  hf_ok=0
  tail -5 "$logs/ppl-hf.log"
  fail "transformers perplexity (bf16), see logs/ppl-hf.log"
fi
hf32_args=()
if [[ $HF_FP32 == 1 ]]; then
  if python3 scripts/gpu/hf_perplexity.py "${ppl_args[@]}" --dtype fp32 \
       --out "$work/ppl-hf-fp32.json" >"$logs/ppl-hf-fp32.log" 2>&1; then
    hf32_args=(--hf-fp32 "$work/ppl-hf-fp32.json")
    note "transformers fp32: $(cat "$work/ppl-hf-fp32.json")"
  else
    fail "transformers perplexity (fp32), see logs/ppl-hf-fp32.log"
  fi
fi

# --- 3. the stack ----------------------------------------------------------------------------
# setsid: the supervisor leads its own process group, so that the exit trap can clean up
# whatever it leaves behind.
# shellcheck disable=SC2086
setsid "$BIN/xserv-supervisor" --model "$MODEL_DIR" --backend cuda --http-port "$PORT" \
  ${SUPERVISOR_ARGS:-} --bin-dir "$BIN" --worker-base-port "$WORKER_BASE_PORT" \
  --worker-arg=--max-model-len --worker-arg="$MAX_MODEL_LEN" \
  --worker-arg=--batch-invariant --worker-arg="${BATCH_INVARIANT:-false}" \
  >"$logs/serve.log" 2>&1 &
sup=$!
load_start=$(date +%s)
if ! python3 "$helper" wait-ready "$URL" "$READY_TIMEOUT_S" --pid "$sup"; then
  tail -20 "$logs/serve.log"
  note "the stack was not ready after $(($(date +%s) - load_start)) s"
  exit 1
fi
note "serving after $(($(date +%s) - load_start)) s"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | tee -a "$summary" || true

# --- 4. xserv-bench ----------------------------------------------------------------------------
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) || gpu_name="unknown GPU"
hardware="$gpu_name, xserv CUDA backend, \
random Qwen3-8B bf16${SUPERVISOR_ARGS:+, supervisor $SUPERVISOR_ARGS}, batch-invariant ${BATCH_INVARIANT:-false}"
level_files=()
bench_start=$(date +%s)
for i in "${!levels[@]}"; do
  c=${levels[i]}
  if ((${#counts[@]} == 0)); then
    n=$((2 * c > MIN_PROMPTS ? 2 * c : MIN_PROMPTS))
    n=$((n > MAX_PROMPTS ? MAX_PROMPTS : n))
  elif ((${#counts[@]} == 1)); then
    n=${counts[0]}
  else
    n=${counts[i]}
  fi
  warmup=$((i == 0 ? BENCH_WARMUP : 0))
  note "bench: concurrency $c, $n requests, $INPUT_LEN in / $OUTPUT_LEN out, warm-up $warmup"
  # A distinct seed per call: the prompts of one level must not be a prefix-cache hit of another.
  rc=0
  timeout "$BENCH_LEVEL_TIMEOUT_S" "$BIN/xserv-bench" --backend openai --url "$URL" \
    --dataset random --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" \
    --concurrency "$c" --requests "$n" --warmup "$warmup" --seed $((i * 7919)) \
    --hardware "$hardware" --out "$work/bench-c$c.json" --svg "$work/bench-c$c.svg" \
    >"$logs/bench-c$c.txt" 2>"$logs/bench-c$c.err" || rc=$?
  cat "$logs/bench-c$c.txt"
  ((rc == 0)) || fail "xserv-bench at concurrency $c: exit $rc (124: over $BENCH_LEVEL_TIMEOUT_S s)"
  [[ -f $work/bench-c$c.json ]] && level_files+=("$work/bench-c$c.json")
done
note "bench: $(($(date +%s) - bench_start)) s"
if ((${#level_files[@]} > 0)); then
  python3 "$helper" merge-bench --out "$OUT/tools-h200-bench.json" --svg "$OUT/tools-h200-bench.svg" \
    --bundle-commit "$XSERV_COMMIT" "${level_files[@]}" | tee -a "$summary" ||
    fail "some bench requests failed"
else
  fail "no bench results"
fi

# --- 5. xserv-perplexity through the router, against transformers ------------------------------
ppl_start=$(date +%s)
if timeout 300 "$BIN/xserv-perplexity" --url "$URL" --file "$text" \
     --max-length "$PPL_MAX_LENGTH" --stride "$PPL_STRIDE" \
     >"$work/ppl-ours.out" 2>"$logs/ppl-ours.log"; then
  { grep '^{' "$work/ppl-ours.out" || true; } | tail -1 >"$work/ppl-ours.json"
  note "xserv-perplexity ($(($(date +%s) - ppl_start)) s): $(cat "$work/ppl-ours.json")"
  if ((hf_ok)); then
    python3 "$helper" compare-ppl --ours "$work/ppl-ours.json" --hf "$work/ppl-hf.json" \
      "${hf32_args[@]}" --hf-ids "$work/hf-ids.json" --url "$URL" --text "$text" \
      --max-rel-nll "$PPL_MAX_REL_NLL" --out "$OUT/tools-h200-ppl.json" | tee -a "$summary" ||
      fail "perplexity: ours vs transformers"
  fi
else
  tail -5 "$logs/ppl-ours.log"
  fail "xserv-perplexity, see logs/ppl-ours.log"
fi
cp "$work"/ppl-*.json "$logs/" 2>/dev/null || true

# --- 6. stop (the exit trap also packs the logs) -----------------------------------------------
stop_stack
finished=1
