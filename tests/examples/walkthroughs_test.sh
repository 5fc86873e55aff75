#!/usr/bin/env bash
# walkthroughs_test.sh WALKTHROUGH SOURCE_DIR MPIEXEC PYTHON ZERO_TRAIN ZERO_DATA ZERO_CKPT ZERO_ESTIMATE
#
# The walkthroughs are real commands. WALKTHROUGH is own-text
# (docs/walkthrough-own-text.md) or fine-tune (docs/walkthrough-fine-tune.md).
# Every ```sh block of the file, in order, goes into one bash script
# (set -euo pipefail), except the block holding the line
# "# walkthrough: settings" (the first one: the machine-specific variables),
# which is replaced by this test's settings below: the same variables, pointing
# at tiny inputs (the golden Llama of tests/data/hf/llama, vocabulary 96 and 32
# positions, with the 96-id tokenizer of tests/data/sft/tokenizer; a few text
# files written here; the SFT rows of tests/data/sft/examples.jsonl) and a few
# steps. The script runs in a temporary directory with the four programs (and
# nothing else of the build) on PATH, and mpirun as root and oversubscribed.
# Then the test checks what a user would look at: the files each step wrote,
# the losses in the metrics file falling, the resumed run starting at the
# saved step, the exported directories complete. A block that fails names its
# line in the walkthrough and shows the end of the output.
# ZE_WALKTHROUGH_KEEP=1 keeps the temporary directory and its log.
set -euo pipefail

which=$1 src=$2 mpiexec=$3 python=$4
shift 4
tools=("$@")
case $which in
  own-text) doc=$src/docs/walkthrough-own-text.md ;;
  fine-tune) doc=$src/docs/walkthrough-fine-tune.md ;;
  *) echo "usage: $0 own-text|fine-tune SOURCE_DIR MPIEXEC PYTHON ZERO_TRAIN ZERO_DATA ZERO_CKPT ZERO_ESTIMATE" >&2; exit 2 ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ze-walkthrough-$which.XXXXXX")
# ZE_WALKTHROUGH_KEEP=1 keeps the directory (its log: what each block printed).
if [[ -n ${ZE_WALKTHROUGH_KEEP:-} ]]; then trap 'echo "kept $tmp"' EXIT; else trap 'rm -rf "$tmp"' EXIT; fi
fail() { echo "FAIL: $*" >&2; exit 1; }

# The programs, by name, and nothing else of the build.
mkdir "$tmp/bin"
for t in "${tools[@]}"; do
  [[ -x $t ]] || fail "$t is not built"
  ln -s "$t" "$tmp/bin/$(basename "$t")"
done

# The "model directory" a user would have: the golden Llama and a tokenizer
# whose 96 ids fit its vocabulary.
model=$tmp/inputs/model
mkdir -p "$model"
cp "$src"/tests/data/hf/llama/config.json "$src"/tests/data/hf/llama/model-*.safetensors \
   "$src"/tests/data/hf/llama/model.safetensors.index.json "$model"/
cp "$src"/tests/data/sft/tokenizer/* "$model"/

# ---- this test's settings, in place of each walkthrough's first block
case $which in
  own-text)
    # Six documents of the words the tokenizer knows (lower case, . , ! ?).
    mkdir -p "$tmp/inputs/text"
    read -r -a words <<< 'the cat sat on the mat. what is that? a red hat, and two blue cats! you are here. three trees and a tall tower.'
    for d in 1 2 3 4 5 6; do
      doc_text=""
      for ((i = 0; i < 300; i++)); do doc_text+="${words[(i * 7 + d * 13 + i / 5) % ${#words[@]}]} "; done
      printf '%s\n' "$doc_text" > "$tmp/inputs/text/doc$d.txt"
    done
    settings=$(cat <<EOF
export PATH="$tmp/bin:\$PATH"
MODEL="$model"
TEXT_DIR="$tmp/inputs/text"
WORK="$tmp/work"
SEQ_LEN=32
MICRO_BATCH=4
ACCUM=1
LR=3e-3
STEPS=24
SAVE_EVERY=12
EOF
)
    ;;
  fine-tune)
    # Held-out rows: two examples of the same shapes (not in the training file).
    cat > "$tmp/inputs/val.jsonl" <<'EOF'
{"prompt": "what is the capital of france?\n", "completion": "paris."}
{"messages": [{"role": "user", "content": "say hello."}, {"role": "assistant", "content": "hello there!"}]}
EOF
    settings=$(cat <<EOF
export PATH="$tmp/bin:\$PATH"
mpirun() { "$mpiexec" --allow-run-as-root --oversubscribe "\$@"; }
MODEL="$model"
TRAIN="$src/tests/data/sft/examples.jsonl"
VAL="$tmp/inputs/val.jsonl"
OUT="$tmp/out"
NP=2
SEQ_LEN=32
MICRO_BATCH=1
ACCUM=1
LR=1e-3
LORA_LR=1e-2
STEPS=12
SAVE_EVERY=6
EOF
)
    ;;
esac

# ---- the walkthrough's ```sh blocks: block_<N>.sh, block_<N>.line (its first line in the file)
awk -v dir="$tmp" '
  !in_block && /^```sh[[:space:]]*$/ { in_block = 1; n++; file = dir "/block_" n ".sh"
                                       print NR + 1 > (dir "/block_" n ".line"); printf "" > file; next }
  in_block && /^```[[:space:]]*$/ { in_block = 0; close(file); next }
  in_block { print > file }
' "$doc"
blocks=$(find "$tmp" -maxdepth 1 -name 'block_*.sh' | wc -l)
(( blocks >= 2 )) || fail "$doc has $blocks \`\`\`sh block(s)"
grep -qx '# walkthrough: settings' "$tmp/block_1.sh" ||
  fail "the first \`\`\`sh block of $doc (line $(cat "$tmp/block_1.line")) is not the settings block: it has no line '# walkthrough: settings'"
for ((n = 2; n <= blocks; n++)); do
  ! grep -q '# walkthrough: settings' "$tmp/block_$n.sh" ||
    fail "$doc has a second settings block, at line $(cat "$tmp/block_$n.line"); only the first block holds settings"
done

# The walkthrough's settings and ours set the same variables, so a command
# never uses one the reader was not asked to set.
names() { sed -nE 's/^[[:space:]]*(export[[:space:]]+)?([A-Z_][A-Z0-9_]*)=.*/\2/p' | sort -u; }
theirs=$(names < "$tmp/block_1.sh")
ours=$(names <<< "$settings")
[[ $theirs == "$ours" ]] ||
  fail "the settings of $doc (line $(cat "$tmp/block_1.line")) set: $(tr '\n' ' ' <<< "$theirs"); this test sets: $(tr '\n' ' ' <<< "$ours")"

{
  echo 'set -euo pipefail'
  echo 'echo "=== walkthrough settings (replaced by the test'"'"'s)"'
  echo "$settings"
  for ((n = 2; n <= blocks; n++)); do
    echo "echo '=== walkthrough block $n ($(basename "$doc"):$(cat "$tmp/block_$n.line"))'"
    cat "$tmp/block_$n.sh"
  done
} > "$tmp/walkthrough.sh"

cd "$tmp"
start=$SECONDS
if ! bash "$tmp/walkthrough.sh" > "$tmp/log" 2>&1; then
  echo "FAIL: the commands of $doc stopped; the block that failed and the last lines of the output:"
  grep '^=== walkthrough block' "$tmp/log" | tail -1
  tail -40 "$tmp/log"
  exit 1
fi
echo "ok: $((blocks - 1)) blocks of $doc ran in $((SECONDS - start)) s"

# ---- what a user would check
log=$tmp/log
expect_log() {  # a fixed string the output must hold
  grep -qF -- "$1" "$log" || fail "the output has no line with \"$1\"; the output:$(echo; cat "$log")"
}
has_files() {  # DIR FILE...
  local dir=$1
  shift
  [[ -d $dir ]] || fail "no directory $dir"
  for f in "$@"; do [[ -s $dir/$f ]] || fail "$dir has no $f (it has: $(ls "$dir" | tr '\n' ' '))"; done
}
# metrics FILE STEPS: the steps are 1..STEPS, each once, in order; the mean
# loss of the last third is below the first third's; the last val_loss below
# the first.
metrics() {
  "$python" - "$1" "$2" <<'EOF'
import json, sys
path, steps = sys.argv[1], int(sys.argv[2])
rows = [json.loads(line) for line in open(path)]
got = [r["step"] for r in rows]
if got != list(range(1, steps + 1)):
    sys.exit(f"FAIL: {path}: steps {got}, expected 1..{steps} once each")
loss = [r["loss"] for r in rows]
third = max(1, steps // 3)
first, last = sum(loss[:third]) / third, sum(loss[-third:]) / third
if not last < first:
    sys.exit(f"FAIL: {path}: the loss did not fall: {loss}")
val = [r["val_loss"] for r in rows if "val_loss" in r]
if len(val) < 2 or not val[-1] < val[0]:
    sys.exit(f"FAIL: {path}: the val loss did not fall: {val}")
print(f"ok: {path}: loss {first:.3f} -> {last:.3f} (means of the first and last {third} steps), val loss {val[0]:.3f} -> {val[-1]:.3f}")
EOF
}
# hf_dir DIR: a Hugging Face model directory that transformers loads, with
# the source's tokenizer files byte for byte.
hf_dir() {
  has_files "$1" config.json model.safetensors generation_config.json tokenizer.json tokenizer_config.json
  for f in tokenizer.json tokenizer_config.json; do
    cmp -s "$model/$f" "$1/$f" || fail "$1/$f differs from the source's $model/$f"
  done
  "$python" - "$1" <<'EOF'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
if c.get("model_type") != "llama" or c.get("architectures") != ["LlamaForCausalLM"] or c.get("vocab_size") != 96:
    sys.exit(f"FAIL: {d}/config.json: {c}")
with open(f"{d}/model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
names = sorted(k for k in header if k != "__metadata__")
want = "model.layers.0.self_attn.q_proj.weight"
if want not in names or "lm_head.weight" not in names or any("lora" in n for n in names):
    sys.exit(f"FAIL: {d}/model.safetensors: tensors {names}")
print(f"ok: {d}: config.json (llama), {len(names)} tensors, generation_config.json, the tokenizer files")
EOF
}

case $which in
  own-text)
    w=$tmp/work
    has_files "$w/data" mytext_train_000000.bin mytext_val_000000.bin
    expect_log "each document: ... <|im_end|>"
    # The trial run, then the same command resuming at the trial's checkpoint,
    # then again: nothing left to do.
    expect_log "resume: auto, no checkpoint in ckpt yet; starting from $model"
    expect_log "weights initialised from $model"
    expect_log "saved checkpoint ckpt/global_step12"
    expect_log "resumed from ckpt/global_step12 at step 12"
    expect_log "run already complete: ckpt/global_step24 is at step 24"
    expect_log "eval: step 24 | val loss"
    metrics "$w/metrics.jsonl" 24
    hf_dir "$w/my-model"
    ;;
  fine-tune)
    o=$tmp/out
    # Loss on the replies only: 35 of the 111 tokens (tests/data/sft/golden.json).
    expect_log "data: SFT: 6 examples from 1 JSON-lines file"
    expect_log "111 tokens, 35 of them trained (31.5%)"
    expect_log "batch: 2 sequences/step = micro 1 x accumulation 1 x 2 ranks; ZeRO stage 3"
    expect_log "resume: auto, no checkpoint in full-ckpt yet; starting from $model"
    expect_log "run already complete: full-ckpt/global_step12 is at step 12"
    metrics "$o/full-metrics.jsonl" 12
    hf_dir "$o/sft-model"
    # zero-estimate, full then LoRA: the adapters' optimizer state only.
    "$python" - "$log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
states = [int(m) for m in re.findall(r"^optimizer_state +(\d+)", text, re.M)]
if len(states) != 2:
    sys.exit(f"FAIL: expected two zero-estimate tables (full fine-tuning, LoRA), found {len(states)} optimizer_state lines")
full, lora = states
# The tiny model: r 16 on q, k, v, o of 2 layers: 2 x (16 x (64+64) + 16 x (64+32) x 2 + 16 x (64+64))
# = 14,336 adapter parameters, 12 bytes each with Adam (fp32 master, m, v), over 2 ranks.
if lora != 14336 * 12 // 2 or not lora < full:
    sys.exit(f"FAIL: optimizer state per rank: full fine-tuning {full}, LoRA {lora} (expected {14336 * 12 // 2})")
if "note: frozen: " not in text:
    sys.exit("FAIL: zero-estimate with LoRA does not say which parameters are frozen")
print(f"ok: zero-estimate: optimizer state per rank {full} bytes (full) vs {lora} bytes (LoRA: the adapters only)")
EOF
    expect_log "batch: 2 sequences/step = micro 1 x accumulation 1 x 2 ranks; ZeRO stage 2"
    expect_log "resume: auto, no checkpoint in lora-ckpt yet; starting from $model"
    expect_log "parameters: 88384 (14336 trainable, 74048 frozen)"
    metrics "$o/lora-metrics.jsonl" 12
    # The PEFT adapter directory.
    has_files "$o/adapter" adapter_model.safetensors adapter_config.json
    "$python" - "$o/adapter" <<'EOF'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(f"{d}/adapter_config.json"))
want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 16, "lora_alpha": 32, "bias": "none"}
for k, v in want.items():
    if c.get(k) != v:
        sys.exit(f"FAIL: {d}/adapter_config.json: {k} is {c.get(k)!r}, expected {v!r}")
if sorted(c.get("target_modules") or []) != ["k_proj", "o_proj", "q_proj", "v_proj"]:
    sys.exit(f"FAIL: {d}/adapter_config.json: target_modules {c.get('target_modules')}")
if abs(c.get("lora_dropout", -1) - 0.05) > 1e-6:
    sys.exit(f"FAIL: {d}/adapter_config.json: lora_dropout {c.get('lora_dropout')}")
with open(f"{d}/adapter_model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
names = sorted(k for k in header if k != "__metadata__")
expected = sorted(f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight"
                  for l in (0, 1) for m in ("q_proj", "k_proj", "v_proj", "o_proj") for ab in "AB")
if names != expected:
    sys.exit(f"FAIL: {d}/adapter_model.safetensors: tensors {names}, expected {expected}")
a = header["base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"]["shape"]
b = header["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"]["shape"]
if a != [16, 64] or b != [32, 16]:
    sys.exit(f"FAIL: {d}/adapter_model.safetensors: k_proj lora_A {a}, lora_B {b}; expected [16, 64], [32, 16]")
print(f"ok: {d}: adapter_config.json (LORA, r 16, lora_alpha 32), adapter_model.safetensors ({len(names)} tensors under PEFT's names)")
EOF
    hf_dir "$o/merged"
    # A merged model is not the base model.
    ! cmp -s "$o/merged/model.safetensors" "$o/sft-model/model.safetensors" || fail "merged and sft-model hold the same weights"
    expect_log "LoRA adapters initialised from adapter"
    ;;
esac
echo "ok: $which walkthrough"
