#!/usr/bin/env bash
# A local Slurm cluster on this one host, for tests and CI (needs root; no systemd needed).
#
# Usage: bash scripts/slurm-local.sh start|stop|status|env
#   start   install the packages if missing, start munged, slurmctld and one slurmd per fake node,
#           wait until every node is idle; prints `export SLURM_CONF=...`. A no-op if already up.
#   stop    cancel what is left, stop the daemons by the PIDs in their PID files, remove the
#           /etc/hosts line that start added.
#   status  exit 0 and print `sinfo` if the cluster answers, non-zero otherwise.
#   env     print `export SLURM_CONF=...` (use: eval "$(bash scripts/slurm-local.sh env)").
#
# Layout: 4 fake nodes hetc-n1..hetc-n4 (all 127.0.0.1), each CPUs=4 RealMemory=4000 and a fake
# gres gpu:2; partitions cpu-a = hetc-n[1-2], cpu-b = hetc-n[3-4], all = ALL (default).
# All state (config, spool, logs, PID files, munge socket) lives under $HETC_SLURM_DIR
# (default /tmp/hetc-slurm). Ports: slurmctld 16817, slurmd 16901-16904.
# HETC_SLURM_TIMEOUT (seconds, default 60) bounds each wait of start and stop.
set -euo pipefail

DIR=${HETC_SLURM_DIR:-/tmp/hetc-slurm}
TIMEOUT=${HETC_SLURM_TIMEOUT:-60}
NODES=(hetc-n1 hetc-n2 hetc-n3 hetc-n4)
CTLD_PORT=16817
SLURMD_PORT0=16901
HOSTS_MARK="# hetc-slurm-local"
CONF="$DIR/etc/slurm.conf"
MUNGE_DIR="$DIR/munge"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket.2"
MUNGE_KEY=/etc/munge/munge.key
export SLURM_CONF="$CONF"

log() { echo "slurm-local: $*" >&2; }

STARTING=0

show_logs() {
    local f
    for f in "$DIR/log/slurmctld.log" "$DIR"/log/slurmd-*.log "$MUNGE_DIR/munged.log"; do
        [ -f "$f" ] || continue
        echo "----- tail of $f -----" >&2
        tail -n 15 "$f" >&2 || true
    done
}

# Report an error and exit; during start, also print the daemons' logs and stop what started.
fail() {
    log "error: $*"
    if [ "$STARTING" = 1 ]; then
        STARTING=0
        show_logs
        log "stopping what was started"
        cmd_stop || true
    fi
    exit 1
}

# The PID in a PID file, if that process is alive and is the expected program.
live_pid() {
    local pidfile=$1 prog=$2 pid comm
    [ -s "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [ -n "$pid" ] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$comm" = "$prog" ] && alive "$pid" || return 1
    echo "$pid"
}

# True while a process exists and is not a zombie (a zombie waits only for its parent to reap it).
alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

ctld_pidfile() { echo "$DIR/run/slurmctld.pid"; }
slurmd_pidfile() { echo "$DIR/run/slurmd-$1.pid"; }
munged_pidfile() { echo "$MUNGE_DIR/munged.pid"; }

ctld_answers() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

# Fails the start at once if the daemon of a PID file that exists has died.
check_running() {
    local pidfile=$1 prog=$2
    if [ -s "$pidfile" ] && ! live_pid "$pidfile" "$prog" >/dev/null; then
        fail "$prog exited (see its log below)"
    fi
}

ctld_started() {
    ctld_answers && return 0
    check_running "$(ctld_pidfile)" slurmctld
    return 1
}

nodes_started() {
    nodes_ready && return 0
    local node
    for node in "${NODES[@]}"; do
        check_running "$(slurmd_pidfile "$node")" slurmd
    done
    return 1
}

# True if a daemon of this cluster runs.
any_running() {
    local node
    live_pid "$(munged_pidfile)" munged >/dev/null && return 0
    live_pid "$(ctld_pidfile)" slurmctld >/dev/null && return 0
    for node in "${NODES[@]}"; do
        live_pid "$(slurmd_pidfile "$node")" slurmd >/dev/null && return 0
    done
    return 1
}

# True when every fake node is known to slurmctld, responding and usable.
nodes_ready() {
    local states
    states=$(sinfo -h -N -p all -o '%N %t' 2>/dev/null) || return 1
    [ "$(printf '%s\n' "$states" | sort -u | grep -cE '^hetc-n[0-9]+ (idle|mix|alloc)$')" \
        -eq "${#NODES[@]}" ]
}

is_up() {
    command -v scontrol >/dev/null 2>&1 && [ -f "$CONF" ] \
        && live_pid "$(ctld_pidfile)" slurmctld >/dev/null && ctld_answers && nodes_ready
}

install_packages() {
    local cmd missing=0
    for cmd in slurmctld slurmd sbatch munged; do
        command -v "$cmd" >/dev/null 2>&1 || missing=1
    done
    [ "$missing" = 1 ] || return 0
    log "installing slurmctld slurmd slurm-client munge"
    local pkgs=(slurmctld slurmd slurm-client munge)
    export DEBIAN_FRONTEND=noninteractive
    if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null \
        || ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; then
        apt-get update -qq || fail "apt-get update failed"
        apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null \
            || fail "apt-get install ${pkgs[*]} failed"
    fi
}

write_config() {
    mkdir -p "$DIR"/{etc,run,log,spool,fakegpu}
    chmod 755 "$DIR"
    ln -sfn /dev/null "$DIR/fakegpu/nvidia0"
    ln -sfn /dev/null "$DIR/fakegpu/nvidia1"
    local last=$((SLURMD_PORT0 + ${#NODES[@]} - 1))
    cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh; rewritten on each start.
ClusterName=hetc-ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again only once its credentials expire (cred_expire, 120 s by
# default): 10 s lets tests requeue a job without waiting two minutes.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
# Het jobs are started only by the backfill scheduler (default bf_interval=30 s).
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job that gives no --mem takes a node's whole memory.
DefMemPerCPU=500
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
MailProg=/bin/true
StateSaveLocation=$DIR/spool/slurmctld
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldPort=$CTLD_PORT
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=hetc-n[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$SLURMD_PORT0-$last] CPUs=4 RealMemory=4000 Gres=gpu:2 State=UNKNOWN
PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu-a Nodes=hetc-n[1-2] MaxTime=INFINITE State=UP
PartitionName=cpu-b Nodes=hetc-n[3-4] MaxTime=INFINITE State=UP
EOF
    cat >"$DIR/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=hetc-n[1-4] Name=gpu Count=2 File=$DIR/fakegpu/nvidia[0-1]
EOF
}

add_hosts_line() {
    grep -qF "$HOSTS_MARK" /etc/hosts && return 0
    # Append in place (/etc/hosts may be a bind mount that cannot be replaced).
    echo "127.0.0.1 ${NODES[*]} $HOSTS_MARK" >>/etc/hosts
}

remove_hosts_line() {
    grep -qF "$HOSTS_MARK" /etc/hosts || return 0
    local kept
    kept=$(grep -vF "$HOSTS_MARK" /etc/hosts || true)
    printf '%s\n' "$kept" >/etc/hosts
}

start_munged() {
    live_pid "$(munged_pidfile)" munged >/dev/null && return 0
    mkdir -p "$MUNGE_DIR"
    chown munge:munge "$MUNGE_DIR"
    chmod 755 "$MUNGE_DIR"
    if [ ! -s "$MUNGE_KEY" ]; then
        log "creating $MUNGE_KEY"
        mkdir -p "$(dirname "$MUNGE_KEY")"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            create-munge-key -f
        fi
        chown munge:munge "$MUNGE_KEY"
        chmod 400 "$MUNGE_KEY"
    fi
    runuser -u munge -- munged --socket="$MUNGE_SOCKET" --pid-file="$(munged_pidfile)" \
        --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" \
        --key-file="$MUNGE_KEY" || fail "munged did not start"
}

wait_until() {
    local what=$1
    shift
    local deadline=$((SECONDS + TIMEOUT))
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${TIMEOUT}s waiting for $what"
        sleep 0.2
    done
}

cmd_start() {
    if is_up; then
        log "already up"
        echo "export SLURM_CONF=$CONF"
        return 0
    fi
    STARTING=1
    install_packages
    write_config
    if ! any_running; then
        # A fresh start: logs and PID files of an earlier run would only confuse.
        rm -f "$DIR"/log/*.log "$DIR"/run/*.pid "$MUNGE_DIR/munged.log" "$MUNGE_DIR/munged.pid"
    fi
    add_hosts_line
    start_munged
    wait_until "the munge socket" test -S "$MUNGE_SOCKET"
    if ! live_pid "$(ctld_pidfile)" slurmctld >/dev/null; then
        # -c: forget jobs of an earlier run of this cluster.
        slurmctld -c -f "$CONF" || fail "slurmctld did not start"
    fi
    wait_until "slurmctld to answer scontrol ping" ctld_started
    local node
    for node in "${NODES[@]}"; do
        if ! live_pid "$(slurmd_pidfile "$node")" slurmd >/dev/null; then
            slurmd -f "$CONF" -N "$node" || fail "slurmd -N $node did not start"
        fi
    done
    wait_until "all nodes to be idle" nodes_started
    STARTING=0
    sinfo >&2
    echo "export SLURM_CONF=$CONF"
}

# Send TERM to the processes in the given PID files (pairs: pidfile program), wait for them all
# to exit, KILL what is left after the timeout.
stop_daemons() {
    local pidfile prog pid deadline
    local -a pids=() files=()
    while [ "$#" -ge 2 ]; do
        pidfile=$1 prog=$2
        shift 2
        files+=("$pidfile")
        pid=$(live_pid "$pidfile" "$prog") || continue
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$pid")
    done
    deadline=$((SECONDS + TIMEOUT))
    for pid in "${pids[@]}"; do
        while alive "$pid"; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                log "process $pid still running after ${TIMEOUT}s: sending KILL"
                kill -KILL "$pid" 2>/dev/null || true
            fi
            sleep 0.1
        done
    done
    rm -f "${files[@]}"
}

cmd_stop() {
    local node jobs
    if [ -f "$CONF" ] && command -v squeue >/dev/null 2>&1 \
        && live_pid "$(ctld_pidfile)" slurmctld >/dev/null; then
        # Jobs left running would leave slurmstepd processes behind.
        jobs=$(squeue -h -o '%i' 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
            local -a ids
            mapfile -t ids <<<"$jobs"
            scancel "${ids[@]}" 2>/dev/null || true
            wait_until "cancelled jobs to end" no_jobs
        fi
    fi
    local -a slurmds=()
    for node in "${NODES[@]}"; do
        slurmds+=("$(slurmd_pidfile "$node")" slurmd)
    done
    stop_daemons "${slurmds[@]}"
    stop_daemons "$(ctld_pidfile)" slurmctld
    stop_daemons "$(munged_pidfile)" munged
    remove_hosts_line
    log "stopped"
}

no_jobs() { [ -z "$(squeue -h -o '%i' 2>/dev/null)" ]; }

cmd_status() {
    if is_up; then
        sinfo
        return 0
    fi
    echo "slurm-local: not running" >&2
    return 1
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
