#!/bin/sh
# Runs one rank of an mpirun job as if it were on a host of its own, so that
# one machine can play several hosts with node-local disks
# (node_local_checkpoint_test.cc). Rank r is on host r / ZE_SIM_RANKS_PER_HOST;
# ZE_SIM_HOSTS names the hosts in that order ("hA hB"). In new mount and UTS
# namespaces (root, or a user namespace that allows them) the rank's host
# name becomes that name and $ZE_SIM_ROOT/<name> is bind-mounted over
# $ZE_SIM_MOUNT: every host sees its own disk at the same path. Open MPI's
# shared-memory transport is unaffected (its segments are not under the
# mount). Usage: mpirun ... simulated_host.sh <program> [args...]
set -eu
rank=${OMPI_COMM_WORLD_RANK:?not under Open MPI mpirun}
index=$((rank / ZE_SIM_RANKS_PER_HOST + 1))
host=$(echo "$ZE_SIM_HOSTS" | cut -d' ' -f"$index")
[ -n "$host" ] || { echo "simulated_host.sh: rank $rank has no host in ZE_SIM_HOSTS=\"$ZE_SIM_HOSTS\"" >&2; exit 2; }
mkdir -p "$ZE_SIM_ROOT/$host" "$ZE_SIM_MOUNT"
exec unshare --mount --uts --propagation private \
  sh -c 'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"' sh \
  "$host" "$ZE_SIM_ROOT/$host" "$ZE_SIM_MOUNT" "$@"
