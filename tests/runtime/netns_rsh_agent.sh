#!/bin/sh
# multihost_netns_test.sh's "ssh": Open MPI's rsh agent (--mca plm_rsh_agent)
# for hosts that are network namespaces on this machine. Open MPI runs it as
#   netns_rsh_agent.sh [OPTIONS] HOST ORTED-COMMAND...
# and it runs the command, as ssh would, in a fresh shell on that host: inside
# the host's network namespace, with a mount namespace whose /tmp is the
# host's own directory and a UTS namespace with the host's own name, in a clean
# environment. The hosts are the lines of the file $ZE_NETNS_HOSTS:
#   ADDRESS NAMESPACE TMP-DIR HOSTNAME
# A host whose namespace is gone (the host is down) fails the way ssh does:
# "ssh: connect to host H port 22: No route to host", exit 255.
if [ "$1" = "--inside" ]; then
  # Second stage, already in the host's namespaces: its /tmp, its name, then
  # the command line as ssh hands it to the remote shell (the words joined).
  tmp="$2" name="$3"
  shift 3
  # What this machine's /tmp holds that the job needs stays in view: the
  # source tree this script is in, and the build tree the host's directory is
  # in (a clone under /tmp, say). Each one's top directory under /tmp is
  # bound into the host's directory first, which then goes over /tmp with it.
  for path in "$(cd "$(dirname "$0")" && pwd)" "$tmp"; do
    case "$path" in
      /tmp/*)
        top="${path#/tmp/}"
        top="${top%%/*}"
        mkdir -p "$tmp/$top" || exit 255
        mountpoint -q "$tmp/$top" || mount --bind "/tmp/$top" "$tmp/$top" || exit 255
        ;;
    esac
  done
  mount --rbind "$tmp" /tmp || exit 255
  hostname "$name" || exit 255
  exec env -i PATH="$PATH" HOME="${HOME:-/root}" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" sh -c "$*"
fi

while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;  # ssh options Open MPI may add (-x, ...): nothing to do here
    *) break ;;
  esac
done
host="$1"
shift
if [ -z "$ZE_NETNS_HOSTS" ] || [ ! -r "$ZE_NETNS_HOSTS" ]; then
  echo "netns_rsh_agent.sh: ZE_NETNS_HOSTS does not name a readable hosts table" >&2
  exit 255
fi
entry=$(awk -v h="$host" '$1 == h { print $2, $3, $4; exit }' "$ZE_NETNS_HOSTS")
if [ -z "$entry" ]; then
  echo "ssh: Could not resolve hostname $host: Name or service not known" >&2
  exit 255
fi
set -f  # the table's words split, never globbed
set -- $entry "$@"
ns="$1" tmp="$2" name="$3"
shift 3
if [ ! -e "/var/run/netns/$ns" ] && [ ! -e "/run/netns/$ns" ]; then
  echo "ssh: connect to host $host port 22: No route to host" >&2
  exit 255
fi
exec ip netns exec "$ns" unshare --mount --uts --propagation private sh "$0" --inside "$tmp" "$name" "$@"
