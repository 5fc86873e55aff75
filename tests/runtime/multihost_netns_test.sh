#!/bin/sh
# zero-run on two hosts, played on this machine by two network namespaces:
#   multihost_netns_test.sh ZERO-TRAIN ZERO-RUN MPIRUN SOURCE-DIR WORK-DIR
#
# Host A and host B are network namespaces joined by a bridge in this one
# (10.77.N.1 and .2; mpirun runs here, at .254). Open MPI reaches them over
# TCP only (btl tcp,self; the daemons' and the ranks' traffic restricted to
# the bridge's subnet) and starts its daemons there through
# netns_rsh_agent.sh, its "ssh", which gives each host its own /tmp (WORK-DIR
# /tmp-a, /tmp-b) and its own host name. The checkpoints and the metrics go to
# WORK-DIR, which both hosts see, as a shared file system.
#
#  1. An uninterrupted run: ZeRO-3 with tensor_parallel.autotp_size 2 on
#     4 ranks, A:2,B:2 (tensor groups inside a host, data parallel across),
#     checkpoints every 4 steps. The bytes on host B's link show that the
#     ranks talked over the network.
#  2. The same run under zero-run --hosts A:2,B:2. Once a checkpoint exists
#     every process of host B is killed (SIGKILL) and its namespace deleted.
#     zero-run must name the failure, find B gone (its probe fails like ssh
#     to a host that is down), relaunch on A:2 (tensor 2 x data 1, the
#     elasticity section keeping the global batch of 16 by accumulating 2
#     micro-batches), resume from the newest checkpoint and finish.
#  3. Every step's loss, the final one included, equals the uninterrupted
#     run's within 1e-6 relative (the layout changed at the restart; the
#     difference measured is printed, and whether it is bitwise). What each
#     host wrote under /tmp (Open MPI's session directory) is in its own
#     directory and not in this machine's /tmp.
#
# Needs root, ip netns, veth and bridge links and unshare; without them it
# exits 77 (skipped) and says what is missing.
set -uf  # -f: the arguments hold [4,8], which is no glob
train="$1" zrun="$2" mpirun="$3" src="$4" work="$5"
agent="$src/tests/runtime/netns_rsh_agent.sh"
skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*"
  exit 1
}
started=$(date +%s)

# --- Can this machine make hosts? ---------------------------------------
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (running as uid $(id -u))"
for tool in ip unshare mount hostname awk timeout; do
  command -v "$tool" >/dev/null 2>&1 || skip "needs $tool, which is not on PATH"
done

# Unique names per run: the PID in every name, a /24 no interface here uses.
id=$$
ns_a="ze-mh$id-a" ns_b="ze-mh$id-b" bridge="zebr$id"
net=""
n=$((id % 200 + 20))
for try in 0 1 2 3 4 5 6 7 8 9; do
  cand=$(((n + try * 17) % 230 + 20))
  if ! ip -o -4 addr show 2>/dev/null | grep -q " 10\.77\.$cand\."; then
    net="10.77.$cand"
    break
  fi
done
[ -n "$net" ] || skip "no free 10.77.N.0/24 subnet for the test's bridge"
addr_a="$net.1" addr_b="$net.2" addr_root="$net.254"

zero_run_pid=""
cleanup() {
  set +e
  if [ -n "$zero_run_pid" ]; then
    kill -TERM "$zero_run_pid" 2>/dev/null
    sleep 1
    kill -KILL "$zero_run_pid" 2>/dev/null
  fi
  for ns in "$ns_a" "$ns_b"; do
    if [ -e "/var/run/netns/$ns" ] || [ -e "/run/netns/$ns" ]; then
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
      ip netns delete "$ns" 2>/dev/null
    fi
  done
  ip link delete "$bridge" 2>/dev/null
  ip link delete "zev${id}a" 2>/dev/null
  ip link delete "zev${id}b" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# What an earlier run killed outright (no trap ran) left behind: namespaces
# and bridges named after a PID that no longer runs this script.
for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep '^ze-mh[0-9]*-[ab]$'); do
  pid=${ns#ze-mh}
  pid=${pid%-?}
  if ! kill -0 "$pid" 2>/dev/null; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns delete "$ns" 2>/dev/null
    ip link delete "zebr$pid" 2>/dev/null
  fi
done

rm -rf "$work"
mkdir -p "$work/tmp-a" "$work/tmp-b" || fail "cannot create $work"
hosts="$work/hosts"
printf '%s %s %s %s\n' "$addr_a" "$ns_a" "$work/tmp-a" "ze-mh$id-a" "$addr_b" "$ns_b" "$work/tmp-b" "ze-mh$id-b" >"$hosts"

# --- The two hosts ---------------------------------------------------------
if ! out=$(ip netns add "$ns_a" 2>&1); then skip "cannot create a network namespace (ip netns add: $out)"; fi
ip netns add "$ns_b" || skip "cannot create a second network namespace"
if ! out=$(ip link add "$bridge" type bridge 2>&1); then skip "cannot create a bridge (ip link add type bridge: $out)"; fi
ip addr add "$addr_root/24" dev "$bridge" && ip link set "$bridge" up || skip "cannot bring up the bridge $bridge"
for h in a b; do
  eval "ns=\$ns_$h addr=\$addr_$h"
  if ! out=$(ip link add "zev$id$h" type veth peer name "zep$id$h" 2>&1); then skip "cannot create a veth pair ($out)"; fi
  ip link set "zep$id$h" netns "$ns" &&
    ip link set "zev$id$h" master "$bridge" &&
    ip link set "zev$id$h" up &&
    ip -n "$ns" link set lo up &&
    ip -n "$ns" addr add "$addr/24" dev "zep$id$h" &&
    ip -n "$ns" link set "zep$id$h" up || skip "cannot wire host $h ($ns) to the bridge"
  ip netns exec "$ns" unshare --mount --uts --propagation private sh -c "mount --bind '$work/tmp-$h' /tmp && hostname x" ||
    skip "cannot give host $h its own /tmp and name (unshare --mount --uts, mount --bind)"
done
echo "hosts: A $addr_a (namespace $ns_a, /tmp = $work/tmp-a), B $addr_b (namespace $ns_b, /tmp = $work/tmp-b);" \
  "mpirun at $addr_root on bridge $bridge"

export ZE_NETNS_HOSTS="$hosts"
mpi="$mpirun --allow-run-as-root --mca plm_rsh_agent $agent --mca btl tcp,self"
mpi="$mpi --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24"

# Both hosts answer a probe, as zero-run will ask them (a bridge that drops
# traffic between the namespaces shows here, not as a hung training run).
for h in "$addr_a" "$addr_b"; do
  if ! out=$(timeout 60 $mpi -np 1 --host "$h:1" hostname 2>&1); then
    fail "host $h does not run a probe: $out"
  fi
done
out=$(timeout 60 $mpi -np 2 --host "$addr_a:1,$addr_b:1" hostname 2>&1) || fail "a 2-rank probe across the hosts failed: $out"
case "$out" in *"ze-mh$id-a"*"ze-mh$id-b"* | *"ze-mh$id-b"*"ze-mh$id-a"*) ;; *) fail "the hosts do not have their own names: $out" ;; esac

steps=120
elastic="--set elasticity.enabled=true --set elasticity.version=0.2 --set elasticity.max_train_batch_size=16"
elastic="$elastic --set elasticity.micro_batch_sizes=[4,8] --set elasticity.min_gpus=2 --set elasticity.max_gpus=4"
elastic="$elastic --set elasticity.model_parallel_size=2 --set elasticity.num_gpus_per_node=2"
elastic="$elastic --set elasticity.ignore_non_elastic_batch_info=true"
train_args() {  # $1: the run's name under $work
  echo "$train --config $src/configs/small-gpt.json --config $src/configs/ds/fp32-adamw.json --set model.d_model=128" \
    "--set zero_optimization.stage=3 --set tensor_parallel.autotp_size=2 $elastic --steps $steps --save-every 4" \
    "--save-dir $work/$1 --metrics $work/$1.jsonl"
}

# --- 1. The uninterrupted run ----------------------------------------------
rx_before=$(cat "/sys/class/net/zev${id}b/statistics/rx_bytes")
timeout 180 $mpi -np 4 --host "$addr_a:2,$addr_b:2" $(train_args straight) >"$work/straight.log" 2>&1 ||
  fail "the uninterrupted run failed (exit $?): $(tail -30 "$work/straight.log")"
grep -q "batch: 16 sequences/step = micro 8 x accumulation 1 x 2 data-parallel ranks" "$work/straight.log" ||
  fail "the uninterrupted run is not 2 data-parallel ranks of micro 8: $(grep 'batch:' "$work/straight.log")"
grep -q "mesh: tp 2 x dp 2" "$work/straight.log" || fail "the uninterrupted run is not tp 2 x dp 2"
# What host B sent through its link (the bridge side receives it).
sent_b=$(($(cat "/sys/class/net/zev${id}b/statistics/rx_bytes") - rx_before))
echo "uninterrupted run: $steps steps on $addr_a:2,$addr_b:2 (tp 2 x dp 2); host B sent $sent_b bytes over its link"
[ "$sent_b" -gt 10000000 ] || fail "host B sent only $sent_b bytes over its link: the ranks did not talk over TCP"

# --- 2. The supervised run, host B killed ----------------------------------
timeout 240 "$zrun" --hosts "$addr_a:2,$addr_b:2" --mpirun "$mpi" --restart-delay 0.5 --probe-timeout 60 --hang-timeout 10 \
  -- $(train_args killed) >"$work/zero-run.log" 2>&1 &
zero_run_pid=$!
kill_at=12  # the kill waits for a checkpoint at this step or later
step=0
waited=0
while [ "$step" -lt "$kill_at" ]; do
  kill -0 "$zero_run_pid" 2>/dev/null || fail "zero-run ended before a checkpoint at step $kill_at: $(tail -30 "$work/zero-run.log")"
  [ "$waited" -lt 3000 ] || fail "no checkpoint at step $kill_at after 150 s: $(tail -30 "$work/zero-run.log")"
  latest=$(cat "$work/killed/latest" 2>/dev/null)
  case "$latest" in global_step*) step=${latest#global_step} ;; esac
  sleep 0.05
  waited=$((waited + 1))
done
# Host B's ranks are running now; what the hosts wrote under /tmp so far.
victims=$(ip netns pids "$ns_b")
ranks_b=0
for p in $victims; do
  case "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" in "$train "*) ranks_b=$((ranks_b + 1)) ;; esac
done
session_a=$(ls "$work/tmp-a" 2>/dev/null | grep "^ompi\.ze-mh$id-a\." | head -1)
session_b=$(ls "$work/tmp-b" 2>/dev/null | grep "^ompi\.ze-mh$id-b\." | head -1)
leaked=$(ls /tmp 2>/dev/null | grep "^ompi\.ze-mh$id-" | head -1)
for p in $victims; do kill -KILL "$p" 2>/dev/null; done
ip netns delete "$ns_b"
killed_at=$(date +%s)
echo "killed host B at checkpoint $latest: $(echo $victims | wc -w) processes, $ranks_b of them zero-train ranks;" \
  "namespace $ns_b deleted"
[ "$ranks_b" = 2 ] || fail "host B ran $ranks_b zero-train ranks when it was killed, not 2"

wait "$zero_run_pid"
rc=$?
echo "zero-run ended $(($(date +%s) - killed_at)) s after the kill"
zero_run_pid=""
log="$work/zero-run.log"
[ "$rc" = 0 ] || fail "zero-run exited $rc: $(tail -40 "$log")"
expect() {  # a line of zero-run's output holding $1
  grep -qF -- "$1" "$log" || fail "zero-run's output lacks \"$1\": $(grep '^zero-run:' "$log")"
}
expect "zero-run: attempt 1 of at most 4, 4 ranks on $addr_a:2,$addr_b:2"
expect "zero-run: attempt 1 failed (exit "
# The host is named when mpirun's or a rank's report named it before mpirun
# stopped (ORTE does not always say which daemon it lost); the probe names it.
grep -qE "^zero-run: attempt 1 failed \(exit [0-9]+\): mpirun lost (its daemon on $addr_b|a host's daemon) \(the host went down" \
  "$log" || fail "zero-run did not say that mpirun lost host B's daemon: $(grep '^zero-run:' "$log")"
expect "zero-run: dropping host that did not answer: $addr_b (ssh: connect to host $addr_b port 22: No route to host)"
expect "zero-run: attempt 2 of at most 4, 2 ranks on $addr_a:2"
expect "resumed from $work/killed/global_step"
expect "batch: 16 sequences/step = micro 8 x accumulation 2 x 1 data-parallel rank"
expect "mesh: tp 2 x dp 1"
expect "zero-run: finished after 1 restart"
grep '^zero-run: attempt 1 failed' "$log"
grep '^zero-run: dropping' "$log"
grep '^zero-run: attempt 2' "$log" | cut -c1-60
grep 'resumed from' "$log"

# --- 3. The losses and the /tmp directories --------------------------------
# step -> loss; a step logged twice (run again after the restart) keeps its last value.
awk -v steps="$steps" '
  function load(file, into,   line, s, l) {
    while ((getline line < file) > 0) {
      if (!match(line, /"step":[0-9]+/)) continue
      s = substr(line, RSTART + 7, RLENGTH - 7)
      if (!match(line, /"loss":[^,}]+/)) continue
      l = substr(line, RSTART + 7, RLENGTH - 7)
      into[s + 0] = l
    }
  }
  BEGIN {
    load(ARGV[1], a); load(ARGV[2], b)
    bad = 0; worst = 0; bitwise = 1
    for (s = 1; s <= steps; ++s) {
      if (!(s in a) || !(s in b)) { printf "step %d: missing (uninterrupted %s, killed %s)\n", s, (s in a), (s in b); bad = 1; continue }
      if (a[s] != b[s]) bitwise = 0
      d = a[s] - b[s]; if (d < 0) d = -d
      rel = d / (a[s] < 0 ? -a[s] : a[s])
      if (rel > worst) worst = rel
      if (rel > 1e-6) { printf "step %d: loss %s, uninterrupted %s (relative %.3g)\n", s, b[s], a[s], rel; bad = 1 }
    }
    printf "final loss (step %d): %s after the restart, %s uninterrupted; largest relative difference over all steps %.3g (%s)\n",
           steps, b[steps], a[steps], worst, bitwise ? "bitwise equal" : "not bitwise"
    exit bad
  }' "$work/straight.jsonl" "$work/killed.jsonl" || fail "the losses after the restart differ from the uninterrupted run's by more than 1e-6"

[ -n "$session_a" ] || fail "no Open MPI session directory of host A in its /tmp ($work/tmp-a): $(ls "$work/tmp-a")"
[ -n "$session_b" ] || fail "no Open MPI session directory of host B in its /tmp ($work/tmp-b): $(ls "$work/tmp-b")"
[ -z "$leaked" ] || fail "a host's session directory is in this machine's /tmp: /tmp/$leaked"
if ls "$work/tmp-a" | grep -q "^ompi\.ze-mh$id-b\." || ls "$work/tmp-b" | grep -q "^ompi\.ze-mh$id-a\."; then
  fail "a host's session directory is in the other host's /tmp"
fi
echo "per-host /tmp: A wrote $work/tmp-a/$session_a, B wrote $work/tmp-b/$session_b, none in /tmp"
rm -rf "$work"  # ~300 MB of checkpoints; a failed run leaves them, and the logs, to look at
echo "PASSED in $(($(date +%s) - started)) s"
