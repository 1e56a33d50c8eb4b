#!/bin/bash
# A single-node Slurm cluster on this machine, to try `autograder slurm` (and for its test):
# Debian or Ubuntu, as root. No GPU gres: jobs grade in the simulator.
#
#   autograder/slurm/local-cluster.sh          install (apt-get), configure, start; wait for the node
#   autograder/slurm/local-cluster.sh start    configure and start (installed already)
#   autograder/slurm/local-cluster.sh stop     stop the daemons this script started
#   autograder/slurm/local-cluster.sh status
#
# It writes /etc/slurm/slurm.conf (refusing to replace one it did not write) from what
# `slurmd -C` finds here. No cgroups: proctrack/linuxproc and task/none run in containers too.
set -euo pipefail

MARK="# written by autograder/slurm/local-cluster.sh"
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)
SYSTEMD=$([ -d /run/systemd/system ] && echo 1 || echo 0)

die() { echo "local-cluster.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run it as root (it installs packages and starts daemons)"

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null && return
    command -v apt-get >/dev/null || die "no apt-get: install slurmctld, slurmd, slurm-client and munge yourself"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge
}

configure() {
    if [ -f "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
        die "$CONF exists and is not this script's: this machine has a Slurm setup already"
    fi
    # This node as slurmd sees it (CPUs, sockets, memory): a node configured with more than
    # it has is drained.
    local hw
    hw=$(slurmd -C | head -n1 | sed 's/^NodeName=[^ ]* //')
    mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
    chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm
    cat > "$CONF" <<EOF
$MARK
ClusterName=autograder-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$NODE NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    [ -f /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    if [ "$SYSTEMD" = 1 ]; then
        systemctl restart munge slurmctld slurmd
    else
        install -d -o munge -g munge -m 755 /run/munge /var/log/munge /var/lib/munge
        running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
        running /run/slurmctld.pid || slurmctld
        running /run/slurmd.pid || slurmd
    fi
    # Wait for the node to take jobs; a node left down by an earlier run is resumed.
    local state=""
    for _ in $(seq 60); do
        state=$(sinfo -h -N -n "$NODE" -o %t 2>/dev/null || true)
        case $state in
            idle|mix|alloc) echo "Slurm is up: node $NODE is $state ($(sinfo -h -N -o '%c CPUs, %m MB, gres %G'))"; return;;
            down*|drain*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true;;
        esac
        sleep 1
    done
    die "node $NODE is '${state:-not answering}' after 60 s: see /var/log/slurm/slurmctld.log and slurmd.log"
}

stop() {
    if [ "$SYSTEMD" = 1 ]; then
        systemctl stop slurmd slurmctld
        return
    fi
    local f
    for f in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
        if running "$f"; then kill "$(cat "$f")"; fi
    done
}

case ${1:-all} in
    all) install_packages; configure; start;;
    start) configure; start;;
    stop) stop;;
    status) sinfo -N -o '%N %t %c CPUs %m MB gres=%G' && squeue;;
    *) die "usage: $0 [start|stop|status]";;
esac
