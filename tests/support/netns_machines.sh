# Two machines on one host, for the multi-machine tests and benches: two
# network namespaces joined by a veth pair, veth_m0 (10.233.7.1) in the
# first and veth_m1 (10.233.7.2) in the second. Sourced, not run:
#   source tests/support/netns_machines.sh
#   netns_machines_up || skip "$NETNS_WHY"   # needs root and iproute2
#   in0 CMD...; in1 CMD...                   # run a command on machine 0 / 1
#   netns_machines_down                      # kills what runs there, removes both
# The namespace names carry the caller's process id, so runs side by side
# do not collide (the addresses live inside the namespaces).
NS0=accel_m0_$$
NS1=accel_m1_$$
NETNS_WHY=

in0() { ip netns exec "$NS0" "$@"; }
in1() { ip netns exec "$NS1" "$@"; }

netns_machines_up() {
  local err
  [ "$(id -u)" = 0 ] || { NETNS_WHY="creating network namespaces needs root"; return 1; }
  command -v ip >/dev/null || { NETNS_WHY="the ip command (iproute2) is not installed"; return 1; }
  err=$(ip netns add "$NS0" 2>&1) || { NETNS_WHY="cannot create network namespaces here: $err"; return 1; }
  err=$(ip netns add "$NS1" 2>&1) || { NETNS_WHY="cannot create a second network namespace: $err"; return 1; }
  err=$(ip link add veth_m0 netns "$NS0" type veth peer name veth_m1 netns "$NS1" 2>&1) ||
    { NETNS_WHY="cannot create a veth pair: $err"; return 1; }
  in0 ip addr add 10.233.7.1/24 dev veth_m0 && in1 ip addr add 10.233.7.2/24 dev veth_m1 &&
    in0 ip link set lo up && in1 ip link set lo up &&
    in0 ip link set veth_m0 up && in1 ip link set veth_m1 up ||
    { NETNS_WHY="cannot address and raise the veth pair"; return 1; }
}

netns_machines_down() {
  local ns pid
  # Whatever still runs inside our namespaces was started by the caller.
  for ns in "$NS0" "$NS1"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  ip netns del "$NS0" 2>/dev/null
  ip netns del "$NS1" 2>/dev/null
  return 0
}
