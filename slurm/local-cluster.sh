#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests and trying the templates (root, no systemd).
#   bash slurm/local-cluster.sh start|stop|status
# State, spool, pid and log files live in MOERT_SLURM_DIR (default /tmp/moert-slurm); the node
# advertises MOERT_SLURM_CPUS CPUs (default: nproc). slurm.conf is written there, and
# /etc/slurm/slurm.conf is made a symlink to it (only if that path is absent or already ours), so
# srun/sbatch/sinfo from any process find it with no SLURM_CONF; where a real slurm.conf is
# in the way, `start` says so and clients need `export SLURM_CONF=$MOERT_SLURM_DIR/slurm.conf`.
# One local cluster at a time (fixed ports 6817/6818). start and stop are idempotent.
set -euo pipefail

dir="${MOERT_SLURM_DIR:-/tmp/moert-slurm}"
conf="$dir/slurm.conf"
etc_conf=/etc/slurm/slurm.conf
export SLURM_CONF="$conf"   # for the daemons and the client calls below

# pid_alive FILE: the pid in FILE is a live process.
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
node_state() { timeout 5 sinfo -h -n localhost -o %T 2>/dev/null | head -1; }
node_up() { [[ "$(node_state)" =~ ^(idle|mixed|allocated|completing)$ ]]; }
daemons_up() { pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/slurmd.pid"; }

# detached OUT CMD...: run CMD (a daemon that forks) with stdio on /dev/null and OUT and no other
# inherited descriptor: none of our caller's pipes (CTest waits for them) or our lock (fd 9).
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

tails() {
  for log in "$dir/slurmctld.log" "$dir/slurmd.log" "$dir/slurmctld.stdout" "$dir/slurmd.stdout" \
             /var/log/munge/munged.log; do
    [ -s "$log" ] && { echo "--- tail $log" >&2; tail -n 15 "$log" >&2; }
  done
  return 0
}

# write_conf: the config for the current settings goes to $conf.new.
write_conf() {
  local cpus="${MOERT_SLURM_CPUS:-$(nproc)}"
  mkdir -p "$dir/state" "$dir/spool"
  cat > "$conf.new" <<EOF
# moert local-cluster (written by slurm/local-cluster.sh; rewritten on start)
ClusterName=moert
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=localhost CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

# /etc/slurm/slurm.conf -> our conf, unless a foreign file is there.
link_etc_conf() {
  mkdir -p /etc/slurm
  if [ -L "$etc_conf" ] || [ ! -e "$etc_conf" ] || head -1 "$etc_conf" | grep -q '^# moert local-cluster'; then
    ln -sfn "$conf" "$etc_conf"
  else
    echo "local-cluster: $etc_conf belongs to another cluster; clients need: export SLURM_CONF=$conf" >&2
  fi
}

start() {
  command -v slurmctld >/dev/null || { echo "local-cluster: slurmctld missing (run scripts/install-deps.sh)" >&2; exit 1; }
  write_conf
  # Already up with this config: nothing to do. Up with another (say MOERT_SLURM_CPUS changed):
  # restart slurmctld and slurmd, so that the cluster always runs what start would write.
  if daemons_up && cmp -s "$conf.new" "$conf"; then
    if munge_ok && node_up; then rm -f "$conf.new"; link_etc_conf; echo "local-cluster: up ($dir)"; return 0; fi
  elif daemons_up; then
    stop_pids slurmd slurmctld
  fi
  mv "$conf.new" "$conf"
  # Ports 6817/6818 are fixed: a controller that answers while ours is down is another cluster's.
  if ! pid_alive "$dir/slurmctld.pid" && timeout 5 scontrol ping >/dev/null 2>&1; then
    echo "local-cluster: another slurmctld answers on localhost (another MOERT_SLURM_DIR?); stop it first" >&2
    exit 1
  fi

  # munged: reuse a working one (its socket is the default one Slurm uses); else start ours
  # and remember that, so stop only ends what start began.
  if ! munge_ok; then
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
    install -d -o munge -g munge -m 0755 /run/munge
    detached "$dir/munged.stdout" runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || { echo "local-cluster: munged did not come up" >&2; tails; exit 1; }
    cp /run/munge/munged.pid "$dir/munged.pid"
  fi

  # The daemons fork into the background (detached: no descriptor of ours). -c: clean job state.
  if ! pid_alive "$dir/slurmctld.pid"; then
    detached "$dir/slurmctld.stdout" slurmctld -c || { echo "local-cluster: slurmctld failed" >&2; tails; exit 1; }
  fi
  if ! pid_alive "$dir/slurmd.pid"; then
    detached "$dir/slurmd.stdout" slurmd -N localhost || { echo "local-cluster: slurmd failed" >&2; tails; exit 1; }
  fi

  # Ready means the node takes jobs; a node left DOWN by an earlier run is resumed once.
  local deadline=$((SECONDS + 30)) resumed=0 state=""
  while [ $SECONDS -lt $deadline ]; do
    state="$(node_state)"
    case "$state" in
      idle|mixed|allocated|completing)
        if daemons_up; then link_etc_conf; echo "local-cluster: up in $dir (node $state)"; return 0; fi ;;
      down*|drain*)
        if [ $resumed -eq 0 ]; then scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true; fi
        resumed=1 ;;
    esac
    sleep 0.2
  done
  echo "local-cluster: node not idle after 30 s (state: '${state:-no answer from slurmctld}')" >&2
  status >&2 || true
  tails
  exit 1
}

# stop_pids NAME...: TERM the daemons in $dir/NAME.pid together (each takes ~2 s to exit), wait up
# to 10 s, KILL what is left, remove the pid files.
stop_pids() {
  local name pids=() pid
  for name in "$@"; do
    pid_alive "$dir/$name.pid" && pids+=("$(cat "$dir/$name.pid")")
  done
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  for name in "$@"; do rm -f "$dir/$name.pid"; done
}

stop() {
  # munged.pid exists only when start launched munged: a munged found running is left alone.
  stop_pids slurmd slurmctld munged
  # Drop the /etc symlink if it points at this state dir.
  if [ "$(readlink "$etc_conf" 2>/dev/null)" = "$conf" ]; then rm -f "$etc_conf"; fi
  echo "local-cluster: stopped ($dir)"
}

status() {
  local rc=0 name
  for name in munged slurmctld slurmd; do
    if pid_alive "$dir/$name.pid"; then echo "$name: running (pid $(cat "$dir/$name.pid"))"
    elif [ "$name" = munged ] && munge_ok; then echo "munged: running (not started by local-cluster)"
    else echo "$name: not running"; rc=1; fi
  done
  echo "node localhost: $(node_state || true)"
  node_up || rc=1
  return $rc
}

# start and stop hold a lock, so that two callers at once (parallel test runs) don't both start
# daemons.
locked() { mkdir -p "$dir"; exec 9>"$dir/lock"; flock -w 60 9 || { echo "local-cluster: $dir/lock busy" >&2; exit 1; }; "$@"; }

case "${1:-}" in
  start) locked start ;;
  stop) locked stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
