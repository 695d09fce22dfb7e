#!/usr/bin/env bash
# test_hosts.sh - several hosts on one machine: network namespaces joined by
# veth pairs on a bridge, each with its own hostname, one MPI job across them
# (Open MPI started through netns-agent).  test_hosts_comm then checks that
# communicators see the hosts apart, pick the network transport between them
# and move host memory through it; test_hosts_fault kills a rank in the
# middle of a transfer.  Skips (77), saying why, where namespaces cannot be
# made.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${MPINCCL_TOP_BUILDDIR:?run by make check}
prog=$top/tests/hosts/test_hosts_comm
skip() { echo "test_hosts: SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null || skip "no ip command (Debian package iproute2)"
command -v unshare >/dev/null || skip "no unshare command (util-linux)"
mpirun=${MPINCCL_MPIRUN:-mpirun}
"$mpirun" --version 2>/dev/null | grep -qi 'open mpi' || skip "the launcher is not Open MPI"

# Alone: no other test's UCX worker may see the bridge (tests/run-test).
net_lock=$top/tests/hosts/.net.lock
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$net_lock" && { flock -x -w 600 9 || echo "test_hosts: $net_lock still held after 600 s; going on" >&2; }
fi

tag=$$
export MPINCCL_NETNS_PREFIX=mpn${tag}-
bridge=mpnbr$tag
net=10.$((tag % 200 + 20)).$((tag / 200 % 250)).
hosts="h1 h2"
cleanup() {
  for h in $hosts; do ip netns del "$MPINCCL_NETNS_PREFIX$h" 2>/dev/null; done
  ip link del "$bridge" 2>/dev/null
}
trap cleanup EXIT
ip link add "$bridge" type bridge 2>/dev/null || skip "cannot create a bridge (no CAP_NET_ADMIN?)"
ip addr add "${net}1/24" dev "$bridge" && ip link set "$bridge" up || exit 1
i=10
for h in $hosts; do
  i=$((i + 1))
  ns=$MPINCCL_NETNS_PREFIX$h
  ip netns add "$ns" || skip "cannot create network namespace $ns"
  ip link add "v$tag$h" type veth peer name eth0 netns "$ns" || exit 1
  ip link set "v$tag$h" master "$bridge" up
  ip -n "$ns" addr add "$net$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

# MPI and UCX talk over the bridge only.
run() { # -np N -H hosts ... program
  "$mpirun" --allow-run-as-root --oversubscribe \
    --mca plm_rsh_agent "$here/netns-agent" -x MPINCCL_NETNS_PREFIX \
    --mca oob_tcp_if_include "${net}0/24" --mca pml ob1 --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "${net}0/24" --mca btl_vader_single_copy_mechanism none \
    -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0 "$@"
}
# Two ranks per host.
run -np 4 -H h1:2,h2:2 "$prog" || exit 1
# A rank killed in the middle of a transfer: the other hears of it in time.
fault=$top/tests/hosts/test_hosts_fault
[ -x "$fault" ] || { echo "test_hosts: built without UCX: no fault test"; exit 0; }
log=$(mktemp)
MPINCCL_NET_TIMEOUT=3 run -np 2 -H h1:1,h2:1 --enable-recovery -x MPINCCL_NET_TIMEOUT "$fault" \
  2>&1 | grep -v -e 'PMIX ERROR' -e '^ *$' | tee "$log"
grep -q 'test_hosts_fault: .*: ok$' "$log"
status=$?
rm -f "$log"
exit $status
