#!/usr/bin/env bash
# Several real hosts on one Linux machine, for MPI: network namespaces dn0,
# dn1, ... joined by a bridge (10.77.0.0/24, veth pairs from iproute2), each
# process started in one with its own host name (a UTS namespace), so that
# OpenMPI sees one node per namespace: shared memory inside a node, TCP
# between nodes. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN).
#   scripts/netns_nodes.sh up N          make N nodes (idempotent)
#   scripts/netns_nodes.sh down          remove them
#   scripts/netns_nodes.sh run N R CMD... mpirun CMD as N nodes of R ranks (makes the nodes)
#   scripts/netns_nodes.sh agent HOST CMD... (OpenMPI's launch agent: runs CMD on HOST)
# Example: scripts/netns_nodes.sh run 2 4 build/tests/parallel_mpi_test
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
net=10.77.0

up() {
  local n=$1
  ip link show dnbr0 >/dev/null 2>&1 || {
    ip link add dnbr0 type bridge
    ip addr add "$net.1/24" dev dnbr0
    ip link set dnbr0 up
  }
  for ((i = 0; i < n; ++i)); do
    ip netns list | grep -qw "dn$i" && continue
    ip netns add "dn$i"
    ip link add "dnv$i" type veth peer name eth0 netns "dn$i"
    ip link set "dnv$i" master dnbr0 up
    ip netns exec "dn$i" ip addr add "$net.$((i + 2))/24" dev eth0
    ip netns exec "dn$i" ip link set eth0 up
    ip netns exec "dn$i" ip link set lo up
  done
}

down() {
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^dn[0-9]+$' || true); do
    ip netns del "$ns"
  done
  ip link del dnbr0 2>/dev/null || true
}

case "${1:-}" in
  up) up "${2:?N}" ;;
  down) down ;;
  agent)
    host=$2; shift 2
    # As ssh would: the remote command is the rest, run by a shell, on HOST.
    exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0"; exec /bin/sh -c "$1"' \
      "$host" "$*" ;;
  run)
    n=${2:?N}; r=${3:?R}; shift 3
    up "$n"
    hosts=$(for ((i = 0; i < n; ++i)); do printf 'dn%d:%d,' "$i" "$r"; done)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    exec mpirun --host "${hosts%,}" -np $((n * r)) -x OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
      --mca plm_rsh_agent "$here/netns_nodes.sh agent" \
      --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
      --mca btl self,vader,tcp "$@" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
