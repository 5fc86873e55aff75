#!/usr/bin/env bash
# adam_bench --step_server, the protocol bench/peers/adam_vs_deepspeed.py
# drives: one request per line, one answer (the step's seconds) per request,
# in order; an unknown request ends the server with exit 2 and its name.
# Then the peer scripts parse (they need torch to run, which CI lacks).
set -euo pipefail
bench="$1"
peers="$2"

if ! grep -q avx512f /proc/cpuinfo; then
  echo "SKIP: no AVX-512 here"; exit 77
fi
out=$(printf 'adamw\nceiling\nadamw\n' | "$bench" --step_server)
[[ $(wc -l <<<"$out") -eq 3 ]] || { echo "expected 3 answers, got: $out"; exit 1; }
while read -r s; do
  awk -v s="$s" 'BEGIN { exit !(s > 0 && s < 60) }' || { echo "not a step time in seconds: '$s'"; exit 1; }
done <<<"$out"

set +e
err=$(printf 'adamw\nsgd\n' | "$bench" --step_server 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -eq 2 ]] || { echo "unknown request: exit $rc, want 2"; exit 1; }
grep -q "unknown request 'sgd'" <<<"$err" || { echo "error does not name the request: $err"; exit 1; }

for f in "$peers"/*.py; do
  python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])" "$f"
done
echo "OK"
