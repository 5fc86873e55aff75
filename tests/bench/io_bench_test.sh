#!/usr/bin/env bash
# bench/io_bench's command line and its file, without a real measurement:
# --help exits 0 and writes nothing; an unknown flag or a bad value exits 2
# naming it and writes nothing; a short run (64 MiB, one round) leaves no
# file behind, and neither does SIGTERM or SIGINT in the middle of a long one
# (the process then dies of the signal).
# Usage: io_bench_test.sh PATH/TO/io_bench SCRATCH_DIR (SCRATCH_DIR: on a
# filesystem with O_DIRECT, so not tmpfs; the test works in a fresh folder in it)
set -euo pipefail
bench=$1
mkdir -p "$2"
dir=$(mktemp -d "$2/io_bench_test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
left() { ls -A "$dir" | grep -v '\.out$' || true; }

"$bench" --dir="$dir" --size_mib=64 --help > "$dir/help.out" 2>&1 || fail "--help exited $?: $(cat "$dir/help.out")"
grep -q -- '--size_mib=N' "$dir/help.out" || fail "--help does not describe --size_mib: $(cat "$dir/help.out")"
grep -q -- '--benchmark_filter' "$dir/help.out" || fail "--help does not list Google Benchmark's flags"
[ -z "$(left)" ] || fail "--help left $(left) in $dir"

for args in "--frobnicate:--frobnicate" "--size_mib=abc:--size_mib" "--size_mib=1:--size_mib" "--rounds=0:--rounds"; do
  set +e
  "$bench" --dir="$dir" "${args%%:*}" > "$dir/bad.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "${args%%:*}: exit $rc, expected 2: $(cat "$dir/bad.out")"
  grep -q -- "${args##*:}" "$dir/bad.out" || fail "${args%%:*} not named: $(cat "$dir/bad.out")"
  [ -z "$(left)" ] || fail "${args%%:*} left $(left) in $dir"
done

"$bench" --dir="$dir" --size_mib=64 --benchmark_list_tests > "$dir/list.out" 2>&1 || fail "--benchmark_list_tests exited $?"
grep -q 'BM_SequentialIo/read/qd8' "$dir/list.out" || fail "no benchmark listed: $(cat "$dir/list.out")"
[ -z "$(left)" ] || fail "--benchmark_list_tests left $(left) in $dir"

"$bench" --dir="$dir" --size_mib=64 --rounds=1 > "$dir/run.out" 2>&1 || fail "a short run exited $?: $(cat "$dir/run.out")"
grep -q 'Medians over 1 repetitions, 64.0 MiB file' "$dir/run.out" || fail "no summary: $(cat "$dir/run.out")"
[ -z "$(left)" ] || fail "a short run left $(left) in $dir"

for sig in TERM INT; do
  "$bench" --dir="$dir" --size_mib=64 --rounds=100000 > "$dir/signal.out" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    grep -q 'IoEngine with' "$dir/signal.out" && break
    sleep 0.1
  done
  grep -q 'IoEngine with' "$dir/signal.out" || { kill -KILL $pid; fail "the run never started: $(cat "$dir/signal.out")"; }
  [ -n "$(left)" ] || fail "no file while running"
  sleep 0.5
  kill -$sig $pid
  set +e
  wait $pid
  rc=$?
  set -e
  [ "$rc" -eq $((128 + $(kill -l $sig))) ] || fail "SIG$sig: exit $rc, expected 128 + SIG$sig"
  [ -z "$(left)" ] || fail "SIG$sig left $(left) in $dir"
done
echo "io_bench: --help, bad flags, a short run and SIGTERM/SIGINT leave nothing behind"
