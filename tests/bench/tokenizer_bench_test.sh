#!/usr/bin/env bash
# bench/tokenizer_bench's command line and a short run, without the peer:
# --help exits 0; a bad value or an unknown flag exits 2 naming it; the list
# has every kind at 1 and 2 threads; a short run (one copy of corpus.txt, one
# pass, two kinds) reports bytes and tokens per second, says "peer: not
# available" and reports no ratio, both with ZE_TOKENIZERS_PYTHON unset and
# with it naming a program that fails; the peer's text file is removed. When
# the environment's ZE_TOKENIZERS_PYTHON works (not on CI), one kind also runs
# against it, and its token count must equal ours.
# Usage: tokenizer_bench_test.sh PATH/TO/tokenizer_bench
set -euo pipefail
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
left() { ls -A "$dir" | grep -v '\.out$' || true; }
short=(--corpus_kib=64 --passes=1)

"$bench" --help > "$dir/help.out" 2>&1 || fail "--help exited $?: $(cat "$dir/help.out")"
grep -q -- '--corpus_kib=N' "$dir/help.out" || fail "--help does not describe --corpus_kib"
grep -q -- '--benchmark_filter' "$dir/help.out" || fail "--help does not list Google Benchmark's flags"

for args in "--corpus_kib=0:--corpus_kib" "--passes=x:--passes" "--add_special=2:--add_special" "--frobnicate:--frobnicate"; do
  set +e
  "$bench" "${args%%:*}" > "$dir/bad.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "${args%%:*}: exit $rc, expected 2: $(cat "$dir/bad.out")"
  grep -q -- "${args##*:}" "$dir/bad.out" || fail "${args%%:*} not named: $(cat "$dir/bad.out")"
done

"$bench" --benchmark_list_tests > "$dir/list.out" 2>&1 || fail "--benchmark_list_tests exited $?"
for kind in gpt2 llama3 qwen2 smollm llama2 mistral gemma spm_only; do
  for t in 1 2; do
    grep -q "BM_Encode/$kind/threads:$t" "$dir/list.out" || fail "BM_Encode/$kind/threads:$t not listed: $(cat "$dir/list.out")"
  done
done

check_no_peer() {  # $1: the run's output
  grep -q 'peer: not available' "$1" || fail "no 'peer: not available': $(cat "$1")"
  grep -q 'bytes_per_second=' "$1" || fail "no bytes_per_second counter: $(cat "$1")"
  grep -q 'tokens_per_second=' "$1" || fail "no tokens_per_second counter: $(cat "$1")"
  if grep -q 'ratio=' "$1"; then fail "a ratio without a peer: $(cat "$1")"; fi
  grep -Eq '^gemma +2 ' "$1" || fail "no summary row for gemma at 2 threads: $(cat "$1")"
}
env -u ZE_TOKENIZERS_PYTHON TMPDIR="$dir" "$bench" "${short[@]}" --benchmark_filter='gpt2|gemma' > "$dir/run.out" 2>&1 ||
  fail "a short run exited $?: $(cat "$dir/run.out")"
check_no_peer "$dir/run.out"
grep -q 'ZE_TOKENIZERS_PYTHON unset' "$dir/run.out" || fail "does not say why there is no peer: $(cat "$dir/run.out")"

ZE_TOKENIZERS_PYTHON=false TMPDIR="$dir" "$bench" "${short[@]}" --benchmark_filter='gpt2|gemma' > "$dir/false.out" 2>&1 ||
  fail "a run with a failing peer exited $?: $(cat "$dir/false.out")"
check_no_peer "$dir/false.out"
grep -q 'throughput.py failed' "$dir/false.out" || fail "does not say the peer failed: $(cat "$dir/false.out")"
[ -z "$(left)" ] || fail "the peer's text file was left behind: $(left)"

if [ -n "${ZE_TOKENIZERS_PYTHON:-}" ] && "$ZE_TOKENIZERS_PYTHON" -c 'import tokenizers' 2>/dev/null; then
  TMPDIR="$dir" "$bench" "${short[@]}" --peer_fast=0 --benchmark_filter='llama3/threads:1' > "$dir/peer.out" 2>&1 ||
    fail "a run with the peer exited $?: $(cat "$dir/peer.out")"
  grep -q "= peer's" "$dir/peer.out" || fail "token counts differ from the peer's: $(cat "$dir/peer.out")"
  grep -q 'ratio=' "$dir/peer.out" || fail "no ratio with the peer: $(cat "$dir/peer.out")"
  [ -z "$(left)" ] || fail "the peer's text file was left behind: $(left)"
  echo "tokenizer_bench: with the peer ($ZE_TOKENIZERS_PYTHON): same token count"
fi
echo "tokenizer_bench: --help, bad flags, the list and a short run without the peer"
