#!/bin/sh
# zero_run_test's launcher: plays hosts named on the command line on this one
# machine. It runs the real mpirun ($1, with its arguments up to "--") and
# takes out --host H:S,... (so every rank runs here); a one-rank probe
# ("-np 1 --host H:1 true") of a host listed in the file $ZE_TEST_DOWN_HOSTS
# fails, as a host that does not come back would.
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
# What precedes the program: -np N and --host H:S,..., in either order.
np=""
hosts=""
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np="$2"; shift 2 ;;
    --host) hosts="$2"; shift 2 ;;
    *) break ;;
  esac
done
if [ "$np" = "1" ] && [ "$1" = "true" ] && [ $# -eq 1 ]; then
  host="${hosts%%:*}"
  if [ -n "$ZE_TEST_DOWN_HOSTS" ] && grep -qx "$host" "$ZE_TEST_DOWN_HOSTS" 2>/dev/null; then
    echo "ssh: connect to host $host port 22: No route to host" >&2
    exit 255
  fi
fi
exec $launcher -np "$np" "$@"
