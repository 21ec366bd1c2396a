#!/usr/bin/env bash
# A cluster of N nodes on this machine, for multi-node tests and measurements (root, iproute2).
#   bash scripts/cluster.sh up --nodes N [--link-mbit M] [--slurm]
#   bash scripts/cluster.sh down | status | stats | env
#   bash scripts/cluster.sh exec NODE CMD...          run CMD on a node (moert-node1, ...)
#   bash scripts/cluster.sh mpirun [--transport tcp|ucx] [mpirun args...]
#   bash scripts/cluster.sh link NODE up|down         plug or unplug a node's link
#   bash scripts/cluster.sh kill NODE                 SIGKILL every process of a node
# A node is a network namespace (moert-nodeK) with its own hostname (a UTS namespace made when a
# command enters it), joined to the bridge moert-br0 in the root namespace by a veth pair
# (moert-vK on the bridge, eth0 in the node). Addresses come from the loopback range only
# (NET.1 on the bridge, NET.(10+K) on node K, route_localnet=1 on these interfaces), with names in
# /etc/hosts: nothing is routed off this machine. --link-mbit shapes each link with tbf in both
# directions (this kernel has no netem: rate only, no added latency). Node K runs on CPU
# (K-1) mod nproc (taskset). docs/multinode.md describes it.
# Knobs (environment):
#   MOERT_CLUSTER_DIR    state: hostfile, rsh agent, Slurm config, spool, logs (default $TMPDIR/moert-cluster)
#   MOERT_CLUSTER_NET    the /24 the nodes live in, as A.B.C; must be inside 127.0.0.0/8 (default 127.77.0)
#   MOERT_CLUSTER_SLOTS  MPI slots per node in the hostfile (default nproc)
#   MOERT_CLUSTER_SLURM_CPUS  CPUs each slurmd advertises (default 2; config_overrides lets it exceed the node's)
#   MOERT_CLUSTER_SLURM_GPUS  GPUs each node advertises as gres without devices, so templates asking for
#                             --gpus-per-task run unchanged (default 4; moert computes on the CPU here)
#   MOERT_CLUSTER_SLURM_PORT  slurmctld's port; slurmd listens on the next one (default 6827: not the
#                             6817/6818 of slurm/local-cluster.sh, so both can run at once)
# up is idempotent (a cluster of another size is rebuilt; another link rate is re-applied); down
# removes what up made (daemons and every process left in the nodes, links, bridge, namespaces,
# /etc/hosts lines, the state folder) and nothing else. One such cluster per machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/cluster.sh"
dir="${MOERT_CLUSTER_DIR:-${TMPDIR:-/tmp}/moert-cluster}"
net="${MOERT_CLUSTER_NET:-127.77.0}"
bridge=moert-br0
hosts_marker="# moert-cluster"
slurm_dir="$dir/slurm"
# slurmd's spool and Open MPI's session folders hold Unix sockets, whose paths may not exceed
# 108 bytes: they go to a short folder named after the state folder (which may lie deep in a
# build tree), removed by down with the rest.
short_dir_of() { echo "${TMPDIR:-/tmp}/moert-cluster-$(printf '%s' "$1" | cksum | cut -d' ' -f1)"; }
short_dir="$(short_dir_of "$dir")"
spool_dir="$short_dir/spool"
slurm_port="${MOERT_CLUSTER_SLURM_PORT:-6827}"
head_name=moert-head   # the root namespace's name on the cluster network (slurmctld, mpirun)

die() { echo "cluster: $*" >&2; exit 1; }
# Loopback range only: a test cluster must never put traffic on a private or public address.
[[ "$net" =~ ^127\.([0-9]{1,3})\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[1]}" -le 255 ] && [ "${BASH_REMATCH[2]}" -le 255 ] ||
  die "MOERT_CLUSTER_NET=$net must be A.B.C inside 127.0.0.0/8 (e.g. 127.77.0)"
subnet="$net.0/24"

node_name() { echo "moert-node$1"; }
node_addr() { echo "$net.$((10 + $1))"; }
node_veth() { echo "moert-v$1"; }
node_cpu() { echo $((($1 - 1) % $(nproc))); }
# node_index NAME: K of moert-nodeK, or fail.
node_index() {
  [[ "$1" =~ ^moert-node([0-9]+)$ ]] || die "'$1' is not a node name (moert-node1..$(num_nodes))"
  local k="${BASH_REMATCH[1]}"
  [ "$k" -ge 1 ] && [ "$k" -le "$(num_nodes)" ] || die "$1: the cluster has nodes moert-node1..$(num_nodes)"
  echo "$k"
}
num_nodes() { cat "$dir/nodes" 2>/dev/null || echo 0; }
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# can_make_namespaces: root with ip, tc, unshare, taskset; says why not on stderr.
can_make_namespaces() {
  [ "$(id -u)" -eq 0 ] || { echo "cluster: needs root (network namespaces, bridge, /etc/hosts)" >&2; return 1; }
  local tool
  for tool in ip tc nsenter unshare taskset; do
    command -v "$tool" >/dev/null || { echo "cluster: '$tool' missing (scripts/install-deps.sh)" >&2; return 1; }
  done
}

# enter K CMD...: CMD in node K's network namespace, under a fresh UTS namespace carrying the
# node's hostname, on the node's CPU. Every process of a node descends from such an entry.
# nsenter, not `ip netns exec`: that one also gives the process a mount namespace with a fresh
# /sys, without the cgroup mounts slurmd needs.
enter() {
  local k="$1"; shift
  exec nsenter --net="/run/netns/$(node_name "$k")" unshare --uts -- /bin/sh -c \
    'hostname "$1" && cpu="$2" && shift 2 && exec taskset -c "$cpu" "$@"' moert-enter \
    "$(node_name "$k")" "$(node_cpu "$k")" "$@"
}

# /etc/hosts is edited in place (it may be a bind mount, which a rename would fail on).
hosts_remove() {
  [ -w /etc/hosts ] || return 0
  if grep -q "$hosts_marker\$" /etc/hosts; then
    local kept
    kept="$(grep -v "$hosts_marker\$" /etc/hosts || true)"
    printf '%s\n' "$kept" > /etc/hosts
  fi
}
hosts_add() {
  local k
  hosts_remove
  {
    echo "$net.1 $head_name $hosts_marker"
    for k in $(seq "$1"); do echo "$(node_addr "$k") $(node_name "$k") $hosts_marker"; done
  } >> /etc/hosts
}

# shape K MBIT: tbf at MBIT on both ends of node K's link (0: no shaping). The bucket holds at
# least 4 ms of traffic and 256 KiB (a veth passes 64 KiB GSO segments whole; a smaller bucket
# would drop them), and up to 50 ms of queue.
shape() {
  local k="$1" mbit="$2" veth ns burst
  veth="$(node_veth "$k")"; ns="$(node_name "$k")"
  if [ "$mbit" = 0 ]; then
    tc qdisc del dev "$veth" root 2>/dev/null || true
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    return 0
  fi
  burst=$((mbit * 1000000 / 8 / 250))
  [ "$burst" -ge 262144 ] || burst=262144
  tc qdisc replace dev "$veth" root tbf rate "${mbit}mbit" burst "$burst" latency 50ms
  ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "${mbit}mbit" burst "$burst" latency 50ms
}

make_node() {
  local k="$1" ns veth
  ns="$(node_name "$k")"; veth="$(node_veth "$k")"
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge"
  sysctl -qw "net.ipv4.conf.$veth.route_localnet=1" "net.ipv6.conf.$veth.disable_ipv6=1"
  ip link set "$veth" up
  # In the node: lo keeps 127.0.0.1 alone (a /8 there would claim the whole cluster subnet as
  # local), eth0 carries the node's address.
  ip netns exec "$ns" sh -c "
    ip link set lo up
    ip addr del 127.0.0.1/8 dev lo 2>/dev/null || true
    ip addr replace 127.0.0.1/32 dev lo
    sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.eth0.route_localnet=1 net.ipv6.conf.all.disable_ipv6=1
    ip addr add $(node_addr "$k")/24 dev eth0
    ip link set eth0 up"
}

# network_up N MBIT: bridge, N nodes, hosts entries, shaping; rebuilt when N changed.
network_up() {
  local n="$1" mbit="$2" k
  if [ -s "$dir/nodes" ] && [ "$(num_nodes)" != "$n" ]; then
    echo "cluster: resizing from $(num_nodes) to $n nodes" >&2
    slurm_down; network_down
  fi
  echo "$n" > "$dir/nodes"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip link set "$bridge" alias "$dir"
    # IPv4 loopback-range addresses only: no IPv6 (link-local) addresses or traffic either.
    sysctl -qw "net.ipv4.conf.$bridge.route_localnet=1" "net.ipv6.conf.$bridge.disable_ipv6=1"
    ip addr add "$net.1/24" dev "$bridge"
    ip link set "$bridge" up
    # The subnet is reached through the bridge even where the local table's 127.0.0.0/8 (lo)
    # is looked up first (policy rules unmerge the local and main tables).
    ip route replace table local "$subnet" dev "$bridge" src "$net.1"
  fi
  for k in $(seq "$n"); do
    ip netns list | grep -qw "^$(node_name "$k")" || make_node "$k"
    ip link set "$(node_veth "$k")" up
    shape "$k" "$mbit"
  done
  echo "$mbit" > "$dir/link_mbit"
  hosts_add "$n"
  write_agent
  local slots="${MOERT_CLUSTER_SLOTS:-$(nproc)}"
  for k in $(seq "$n"); do echo "$(node_name "$k") slots=$slots"; done > "$dir/hostfile"
}

# The rsh agent Open MPI starts its daemons with: AGENT HOST CMD... (ssh semantics: the words of
# CMD form one shell command line), here entering HOST's namespaces instead of logging in.
write_agent() {
  cat > "$dir/rsh-agent" <<EOF
#!/bin/sh
# Written by scripts/cluster.sh: Open MPI's plm_rsh_agent for the namespaced nodes.
host="\$1"; shift
exec bash "$self" exec "\$host" /bin/sh -c "\$*"
EOF
  chmod +x "$dir/rsh-agent"
}

network_down() {
  local k ns
  # Every process still in a node (daemons, orphaned ranks) goes first: a namespace with
  # processes in it outlives `ip netns del`.
  for ns in $(ip netns list 2>/dev/null | awk '/^moert-node[0-9]+/ {print $1}'); do
    kill_namespace "$ns"
    k="${ns#moert-node}"
    ip link del "$(node_veth "$k")" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true   # its routes go with it
  hosts_remove
  rm -f "$dir/nodes" "$dir/link_mbit" "$dir/hostfile" "$dir/rsh-agent"
  rm -rf "$short_dir"
}

# kill_namespace NS: SIGKILL every process in NS until none is left (5 s at most).
kill_namespace() {
  local pids
  for _ in $(seq 50); do
    pids="$(ip netns pids "$1" 2>/dev/null || true)"
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "cluster: processes left in $1: $pids" >&2
}

# --- Slurm: slurmctld in the root namespace (hostname moert-head), one slurmd per node ------------
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# detached OUT CMD...: CMD (a daemon that forks) with stdio on /dev/null and OUT and no other
# inherited descriptor (CTest waits for its pipes; fd 9 is our lock).
detached() {
  local out="$1" fd; shift
  (
    for fd in /proc/self/fd/*; do
      fd="${fd##*/}"
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@"
  ) </dev/null >"$out" 2>&1
}

write_slurm_conf() {
  local n="$1" k cpus="${MOERT_CLUSTER_SLURM_CPUS:-2}" gpus="${MOERT_CLUSTER_SLURM_GPUS:-4}"
  [[ "$gpus" =~ ^[1-9][0-9]?$ ]] || die "MOERT_CLUSTER_SLURM_GPUS=$gpus must be 1..99"
  mkdir -p "$slurm_dir/state"
  for k in $(seq "$n"); do mkdir -p "$spool_dir/$(node_name "$k")" "$slurm_dir/tmp/$(node_name "$k")"; done
  {
    cat <<EOF
# moert cluster (written by scripts/cluster.sh; rewritten on up)
ClusterName=moertcluster
SlurmctldHost=$head_name($net.1)
SlurmctldPort=$slurm_port
SlurmdPort=$((slurm_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job may start again 10 s after it ended, not the default 120 s
AuthInfo=cred_expire=10
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$slurm_dir/state
# %n: each node's own spool, pid and log file
SlurmdSpoolDir=$spool_dir/%n
SlurmdPidFile=$slurm_dir/slurmd.%n.pid
SlurmdLogFile=$slurm_dir/slurmd.%n.log
# the PMIx plugin's files per node (the nodes share this machine's /tmp)
TmpFS=$slurm_dir/tmp/%n
SlurmctldPidFile=$slurm_dir/slurmctld.pid
SlurmctldLogFile=$slurm_dir/slurmctld.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
EOF
    for k in $(seq "$n"); do
      echo "NodeName=$(node_name "$k") NodeAddr=$(node_addr "$k") CPUs=$cpus Gres=gpu:$gpus State=UNKNOWN"
    done
    echo "PartitionName=cluster Nodes=moert-node[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } > "$slurm_dir/slurm.conf.new"
  # Slurm counts a GPU only with a device file: links to /dev/null stand in, so that jobs asking
  # for GPUs are placed (CUDA_VISIBLE_DEVICES is set; moert computes on the CPU here).
  for k in $(seq 0 $((gpus - 1))); do ln -sfn /dev/null "$slurm_dir/gpu$k"; done
  echo "Name=gpu File=$slurm_dir/gpu[0-$((gpus - 1))]" > "$slurm_dir/gres.conf"
}

slurm_tails() {
  local log
  for log in "$slurm_dir"/*.log "$slurm_dir"/*.stdout; do
    [ -s "$log" ] && { echo "--- tail $log" >&2; tail -n 10 "$log" >&2; }
  done
  return 0
}

slurm_node_states() { SLURM_CONF="$slurm_dir/slurm.conf" timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null; }

slurm_up() {
  local n="$1" k
  command -v slurmctld >/dev/null || die "slurmctld missing (scripts/install-deps.sh)"
  write_slurm_conf "$n"
  if [ -f "$slurm_dir/slurm.conf" ] && ! cmp -s "$slurm_dir/slurm.conf.new" "$slurm_dir/slurm.conf"; then
    slurm_stop_daemons
  fi
  mv "$slurm_dir/slurm.conf.new" "$slurm_dir/slurm.conf"
  export SLURM_CONF="$slurm_dir/slurm.conf"
  if ! munge_ok; then
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
    install -d -o munge -g munge -m 0755 /run/munge
    detached "$slurm_dir/munged.stdout" runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || { slurm_tails; die "munged did not come up"; }
    cp /run/munge/munged.pid "$slurm_dir/munged.pid"
  fi
  if ! pid_alive "$slurm_dir/slurmctld.pid"; then
    detached "$slurm_dir/slurmctld.stdout" unshare --uts -- /bin/sh -c "hostname $head_name && exec slurmctld -c" ||
      { slurm_tails; die "slurmctld failed"; }
  fi
  for k in $(seq "$n"); do
    if ! pid_alive "$slurm_dir/slurmd.$(node_name "$k").pid"; then
      detached "$slurm_dir/slurmd.$(node_name "$k").stdout" bash "$self" exec "$(node_name "$k")" \
        slurmd -N "$(node_name "$k")" || { slurm_tails; die "slurmd on $(node_name "$k") failed"; }
    fi
  done
  # Ready: every node idle (a node left DOWN by an earlier run is resumed once).
  local deadline=$((SECONDS + 30)) states resumed=0
  while [ $SECONDS -lt $deadline ]; do
    states="$(slurm_node_states || true)"
    if [ "$(grep -cE ' (idle|mixed|allocated|completing)$' <<< "$states")" -eq "$n" ]; then return 0; fi
    if [ $resumed -eq 0 ] && grep -qE ' (down|drain)' <<< "$states"; then
      scontrol update NodeName="moert-node[1-$n]" State=RESUME >/dev/null 2>&1 || true
      resumed=1
    fi
    sleep 0.3
  done
  echo "cluster: Slurm nodes not idle after 30 s:" >&2
  echo "${states:-no answer from slurmctld}" >&2
  slurm_tails
  exit 1
}

# stop_pid_files FILE...: TERM the daemons together, KILL what is left after 10 s.
stop_pid_files() {
  local f pids=() pid
  for f in "$@"; do pid_alive "$f" && pids+=("$(cat "$f")"); done
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  rm -f "$@"
}

slurm_stop_daemons() {
  local files=("$slurm_dir"/slurmd.*.pid "$slurm_dir/slurmctld.pid")
  stop_pid_files "${files[@]}"
}

slurm_down() {
  [ -d "$slurm_dir" ] || return 0
  slurm_stop_daemons
  # munged.pid exists only when we started munged: one found running is left alone.
  stop_pid_files "$slurm_dir/munged.pid"
  rm -rf "$slurm_dir" "$spool_dir"
}

# --- commands ---------------------------------------------------------------------------------
made_dir=0
locked() {
  [ -d "$dir" ] || made_dir=1
  mkdir -p "$dir"; exec 9>"$dir/lock"; flock -w 120 9 || die "$dir/lock busy"; "$@"
}

# The bridge carries the state folder of the cluster that made it (its alias): one cluster per
# machine, and neither up nor down touches a live cluster of another folder. A cluster whose state
# folder is gone (or no longer carries up's marker) is stale: its run was killed before down, or
# made it in a mount namespace that has ended. Nothing can use it any more, so it is taken down,
# with one line saying so, instead of blocking every later cluster of the machine.
check_owner() {
  local owner
  owner="$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null || true)"
  [ -n "$owner" ] && [ "$owner" != "$dir" ] || return 0
  if [ -f "$owner/.moert-cluster" ]; then
    die "a cluster with state in $owner is up; take it down first (MOERT_CLUSTER_DIR=$owner bash $self down)"
  fi
  echo "cluster: taking down the stale cluster of $owner (that state folder is gone)" >&2
  stale_down "$owner"
}

# stale_down OWNER: what a cluster of the state folder OWNER left, found without that folder:
# its slurmctld by the configuration in its environment (the slurmds die with their nodes), the
# nodes, bridge and /etc/hosts lines, and its short folder.
stale_down() {
  local owner="$1" pid
  for pid in $(pgrep -x slurmctld || true); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$owner/slurm/slurm.conf"; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  network_down
  rm -rf "$(short_dir_of "$owner")"
}

cmd_up() {
  local n="" mbit=0 slurm=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) n="${2:-}"; shift 2 ;;
      --link-mbit) mbit="${2:-}"; shift 2 ;;
      --slurm) slurm=1; shift ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: --nodes N (1..200) is required"
  [[ "$mbit" =~ ^[0-9]+$ ]] || die "up: --link-mbit must be a whole number of Mbit/s (0: unshaped)"
  can_make_namespaces || exit 1
  check_owner
  touch "$dir/.moert-cluster"   # marks the folder as ours, for down
  network_up "$n" "$mbit"
  if [ "$slurm" = 1 ]; then slurm_up "$n"; else slurm_down; fi
  local link="$mbit Mbit/s"
  [ "$mbit" != 0 ] || link=unshaped
  echo "cluster: up: $n node(s) on $subnet, links $link$([ "$slurm" = 1 ] && echo ", Slurm" || true) ($dir)"
}

cmd_down() {
  check_owner
  slurm_down
  network_down
  # The state folder goes if up made it (the marker) or this call did; the lock file with it.
  if [ -f "$dir/.moert-cluster" ] || [ "$made_dir" = 1 ]; then rm -rf "$dir"; fi
  echo "cluster: down"
}

cmd_status() {
  local n k rc=0 state
  n="$(num_nodes)"
  [ "$n" -gt 0 ] || { echo "cluster: not up ($dir)"; return 1; }
  echo "cluster: $n node(s) on $subnet, link $(cat "$dir/link_mbit" 2>/dev/null || echo 0) Mbit/s (0: unshaped), state in $dir"
  for k in $(seq "$n"); do
    state="$(cat "/sys/class/net/$(node_veth "$k")/operstate" 2>/dev/null || echo missing)"
    [ "$state" = up ] || rc=1
    echo "$(node_name "$k") $(node_addr "$k") cpu $(node_cpu "$k") link $state"
  done
  if [ -f "$slurm_dir/slurm.conf" ]; then
    export SLURM_CONF="$slurm_dir/slurm.conf"
    pid_alive "$slurm_dir/slurmctld.pid" && echo "slurmctld: running" || { echo "slurmctld: not running"; rc=1; }
    slurm_node_states | sed 's/^/slurm: /' || rc=1
  fi
  return $rc
}

# stats: bytes each node's link carried, from the root end of its veth (its rx is the node's tx).
cmd_stats() {
  local n k veth
  n="$(num_nodes)"
  [ "$n" -gt 0 ] || die "not up"
  for k in $(seq "$n"); do
    veth="/sys/class/net/$(node_veth "$k")/statistics"
    echo "$(node_name "$k") tx_bytes=$(cat "$veth/rx_bytes") rx_bytes=$(cat "$veth/tx_bytes")"
  done
}

# env: the settings a shell (or a test) needs to use the cluster's Slurm and MPI.
cmd_env() {
  echo "export SLURM_CONF=$slurm_dir/slurm.conf"
  # Open MPI leaves 127.0.0.0/8 out by default; the cluster lives there.
  echo "export OMPI_MCA_btl_tcp_if_include=$subnet OMPI_MCA_oob_tcp_if_include=$subnet"
  echo "export MOERT_CLUSTER_HOSTFILE=$dir/hostfile"
}

cmd_mpirun() {
  local transport=tcp
  if [ "${1:-}" = "--transport" ]; then transport="${2:-}"; shift 2; fi
  [ -s "$dir/hostfile" ] || die "not up (bash scripts/cluster.sh up --nodes N)"
  local args=(--hostfile "$dir/hostfile" --mca plm_rsh_agent "$dir/rsh-agent"
              --mca oob_tcp_if_include "$subnet"
              --mca orte_tmpdir_base "$short_dir/tmp"   # session folders, so down removes what killed daemons leave
              # mpirun's links to its daemons: an unplugged node is noticed after 2 s idle + 3 probes
              # 1 s apart (default 300 s + 9 x 20 s; without it mpirun waited forever for the node)
              --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3
              --bind-to none)   # each node's CPU is its taskset; Open MPI binding would fight it
  case "$transport" in
    # ob1: tcp between nodes (the cluster subnet only), vader shared memory within one.
    tcp) args+=(--mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include "$subnet") ;;
    # UCX: Open MPI 4.1 takes pml ucx without InfiniBand only when devices and tls allow any;
    # UCX's tcp on the node's eth0 between nodes, its shared memory within one (UCX tells the
    # namespaced nodes apart: their traffic shows on the links). MOERT_CLUSTER_UCX_TLS overrides.
    ucx) args+=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl self
                -x "UCX_TLS=${MOERT_CLUSTER_UCX_TLS:-tcp,sm,self}" -x UCX_NET_DEVICES=eth0) ;;
    *) die "mpirun: --transport must be tcp or ucx" ;;
  esac
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
  exec mpirun "${args[@]}" "$@"
}

cmd_exec() {
  [ $# -ge 2 ] || die "usage: exec NODE CMD..."
  local k
  k="$(node_index "$1")"; shift
  enter "$k" "$@"
}

cmd_link() {
  local k
  k="$(node_index "${1:-}")"
  case "${2:-}" in
    up|down) ip link set "$(node_veth "$k")" "$2" ;;
    *) die "usage: link NODE up|down" ;;
  esac
}

cmd_kill() {
  local k
  k="$(node_index "${1:-}")"
  kill_namespace "$(node_name "$k")"
}

case "${1:-}" in
  up) shift; check_owner; locked cmd_up "$@" ;;
  down) shift; can_make_namespaces || exit 1; check_owner; locked cmd_down ;;
  status) cmd_status ;;
  stats) cmd_stats ;;
  env) cmd_env ;;
  exec) shift; cmd_exec "$@" ;;
  mpirun) shift; cmd_mpirun "$@" ;;
  link) shift; cmd_link "$@" ;;
  kill) shift; cmd_kill "$@" ;;
  *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
