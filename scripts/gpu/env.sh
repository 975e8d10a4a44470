# Sourced on the GPU host: library path for the bundle and the host's CUDA/NCCL, and the
# environment every xserv process there must run with.
XSERV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LD_LIBRARY_PATH="$XSERV_ROOT/.bundle/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the multi-GPU hosts
export OUT=${OUT:-$XSERV_ROOT/.gpu-out}
mkdir -p "$OUT"
# The host gets no .git: bundle.sh records the commit it was built from.
XSERV_COMMIT=$(cat "$XSERV_ROOT/.bundle/COMMIT" 2>/dev/null || echo unknown)
export XSERV_COMMIT
if [[ -f $XSERV_ROOT/.bundle/payload.tar.xz && ! -d $XSERV_ROOT/.bundle/bin ]]; then
  tar -C "$XSERV_ROOT/.bundle" -xJf "$XSERV_ROOT/.bundle/payload.tar.xz"
fi
if [[ -f $XSERV_ROOT/.bundle/assets.tar.xz && ! -d $XSERV_ROOT/.assets/tokenizers ]]; then
  mkdir -p "$XSERV_ROOT/.assets" && tar -C "$XSERV_ROOT/.assets" -xJf "$XSERV_ROOT/.bundle/assets.tar.xz"
fi
export XSERV_SOURCE_DIR=$XSERV_ROOT  # tests locate tests/data and .assets through it
export XSERV_BIN_DIR=$XSERV_ROOT/.bundle/bin  # integration tests start the bundled binaries
# The .assets tokenizer folder of an architecture name the GPU scripts take (e2e_reference.py's).
tokenizer_of() {
  case $1 in
    qwen3*) echo qwen3 ;; llama3*) echo llama3 ;; gpt2) echo gpt2 ;; gpt-oss*) echo gpt-oss ;;
    *) echo "unknown arch: $1" >&2; return 2 ;;
  esac
}
# The model directory of ARCH a script runs on: $MODEL_DIR when set (a model made earlier in the
# same device call), else random weights of the real config written under DIR by
# e2e_reference.py --model-only (FP8=1: the HF FP8 layout). Prints the path; the build's output
# goes to stderr. Usage: model=$(model_of ARCH DIR 2>LOG) || exit 1
model_of() {
  local arch=$1 dir=$2 tok
  if [[ -n ${MODEL_DIR:-} ]]; then echo "$MODEL_DIR"; return 0; fi
  tok=$(tokenizer_of "$arch") || return 2
  PYTHONUNBUFFERED=1 python3 "$XSERV_ROOT/scripts/gpu/e2e_reference.py" --arch "$arch" \
    --tokenizer "$XSERV_ROOT/.assets/tokenizers/$tok" --out "$dir" --model-only \
    $([[ ${FP8:-0} == 1 ]] && echo --fp8) >&2 || return 1
  echo "$dir/model"
}
