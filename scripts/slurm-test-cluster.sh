#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, with its accounting database, for the Slurm runner's
# tests and benchmarks, from Debian's `slurm-wlm`, `slurmdbd`, `mariadb-server` and `munge`
# packages (scripts/install-test-deps.sh installs them).
#
#   scripts/slurm-test-cluster.sh start [DIR]    start it (writing its configuration if needed) and
#                                                print the SLURM_CONF to export; if it runs, just print
#   scripts/slurm-test-cluster.sh stop [DIR]     stop it (its state stays in DIR)
#
# DIR defaults to $MISSION_TEST_SLURM_DIR, else ${TMPDIR:-/tmp}/mission-test-slurm-UID. Everything
# lives there: munge's key and socket, slurm.conf and slurmdbd.conf, the controller's state, the
# node's spool and MariaDB's data. mariadbd, slurmdbd, slurmctld and slurmd run as root without
# systemd, on 127.0.0.1 and free ports. The node offers
# this machine's CPUs and memory (less 512 MB), and two fake GPUs (gres on device nodes that are
# copies of /dev/null); jobs are held to their CPUs and memory by cgroups (Slurm detects v1 or
# v2), so a job past its --mem ends OUT_OF_MEMORY. Needs root (slurmd starts jobs as their
# users). The node has a name of this cluster's own (NodeName=mission-…), so its jobs' cgroups
# (/sys/fs/cgroup/*/slurm_NODE) are apart from any other test cluster's, whose job ids are the
# same; `stop` cancels what still runs and removes them. Accounting goes through slurmdbd into MariaDB, so sacct answers for finished jobs as on
# a real site; the node samples each job's memory and CPU every second (JobAcctGatherFrequency),
# so even a test's short job has a MaxRSS.
set -euo pipefail

action="${1:-start}"
dir="${2:-${MISSION_TEST_SLURM_DIR:-${TMPDIR:-/tmp}/mission-test-slurm-$(id -u)}}"

for program in munged slurmctld slurmd slurmdbd sinfo sacctmgr mariadbd mariadb-install-db mariadb-admin; do
  if ! command -v "$program" >/dev/null 2>&1; then
    echo "Slurm is not installed ($program is missing): run scripts/install-test-deps.sh" >&2
    exit 3
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "a test Slurm cluster needs root (slurmd starts jobs as their users)" >&2
  exit 3
fi

conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

running() {
  [ -f "$conf" ] && timeout 5 sinfo -h -o %T >/dev/null 2>&1
}

stop_pid() {
  local file="$1"
  if [ -f "$file" ]; then
    kill "$(cat "$file")" 2>/dev/null || true
    rm -f "$file"
  fi
}

case "$action" in
  start)
    mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge" "$dir/dev" "$dir/mariadb"
    chmod 755 "$dir"
    exec 9>"$dir/.lock"
    flock -w 120 9
    if running; then
      echo "$conf"
      exit 0
    fi
    # munge: a key of this cluster's own, a socket in DIR.
    if [ ! -f "$dir/munge/munge.key" ]; then
      head -c 1024 /dev/urandom >"$dir/munge/munge.key"
    fi
    chown -R munge:munge "$dir/munge"
    chmod 755 "$dir/munge"
    chmod 400 "$dir/munge/munge.key"
    stop_pid "$dir/munge/munged.pid"
    runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" 9>&-
    if [ ! -f "$conf" ]; then
      ports="$(python3 -c 'import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')"
      read -r ctld_port slurmd_port dbd_port db_port <<<"$ports"
      echo "$db_port" >"$dir/mariadb.port"
      db_password="$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
      # slurmdbd refuses a configuration file others may read (it holds the password).
      (
        umask 077
        cat >"$dir/slurmdbd.conf" <<EOF
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=$db_password
StorageLoc=slurm_acct_db
EOF
      )
      for i in 0 1; do
        [ -e "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 1 3
      done
      echo "Name=gpu File=$dir/dev/nvidia[0-1]" >"$dir/gres.conf"
      cat >"$dir/cgroup.conf" <<EOF
CgroupPlugin=autodetect
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
EOF
      cpus="$(nproc)"
      memory="$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 512 ))"
      host="$(hostname -s)"
      node="mission-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
      echo "$node" >"$dir/node"
      cat >"$conf" <<EOF
ClusterName=mission-test
GresTypes=gpu
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MinJobAge=300
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoragePass=$dir/munge/munge.socket
NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    fi
    # MariaDB, with the database slurmdbd writes (its own user, by password over loopback).
    db_port="$(cat "$dir/mariadb.port")"
    db_socket="$dir/mariadb/mariadbd.sock"
    if [ ! -d "$dir/mariadb/mysql" ]; then
      mariadb-install-db --user=root --datadir="$dir/mariadb" --auth-root-authentication-method=socket \
        --skip-test-db >"$dir/log/mariadb-install.log" 2>&1 || { tail -n 20 "$dir/log/mariadb-install.log" >&2; exit 1; }
    fi
    stop_pid "$dir/mariadb.pid"
    setsid mariadbd --no-defaults --user=root --datadir="$dir/mariadb" --socket="$db_socket" --port="$db_port" \
      --bind-address=127.0.0.1 --pid-file="$dir/mariadb.pid" --log-error="$dir/log/mariadb.log" \
      --skip-name-resolve </dev/null >/dev/null 2>&1 9>&- &
    for _ in $(seq 1 60); do
      mariadb-admin --no-defaults --socket="$db_socket" --user=root ping >/dev/null 2>&1 && break
      sleep 1
    done
    db_password="$(sed -n 's/^StoragePass=//p' "$dir/slurmdbd.conf")"
    mariadb --no-defaults --socket="$db_socket" --user=root -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$db_password'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
      || { echo "MariaDB did not start within 60 s" >&2; tail -n 20 "$dir/log/mariadb.log" >&2; exit 1; }
    stop_pid "$dir/slurmdbd.pid"
    slurmdbd >/dev/null 2>&1 9>&- || { tail -n 20 "$dir/log/slurmdbd.log" >&2; exit 1; }
    for _ in $(seq 1 60); do
      timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break
      sleep 1
    done
    if ! timeout 10 sacctmgr -n -P list cluster format=cluster | grep -qx mission-test; then
      timeout 10 sacctmgr -i add cluster mission-test >/dev/null \
        || { echo "slurmdbd did not take the cluster" >&2; tail -n 20 "$dir/log/slurmdbd.log" >&2; exit 1; }
    fi
    slurmctld -f "$conf" >/dev/null 2>&1 9>&- || { tail -n 20 "$dir/log/slurmctld.log" >&2; exit 1; }
    slurmd -f "$conf" -N "$(cat "$dir/node")" >/dev/null 2>&1 9>&- || { tail -n 20 "$dir/log/slurmd.log" >&2; exit 1; }
    for _ in $(seq 1 60); do
      if [ "$(sinfo -h -o %T 2>/dev/null | head -n1)" = "idle" ]; then
        echo "$conf"
        exit 0
      fi
      sleep 1
    done
    echo "the test Slurm node did not become idle within 60 s" >&2
    tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2
    exit 1
    ;;
  stop)
    # What still runs is cancelled first, so that no job outlives the cluster in its cgroups.
    if running; then
      squeue -h -o %A | xargs -r scancel 2>/dev/null || true
      for _ in $(seq 1 15); do
        [ -z "$(squeue -h -t running,completing -o %A 2>/dev/null)" ] && break
        sleep 1
      done
    fi
    stop_pid "$dir/slurmd.pid"
    stop_pid "$dir/slurmctld.pid"
    stop_pid "$dir/slurmdbd.pid"
    stop_pid "$dir/mariadb.pid"
    stop_pid "$dir/munge/munged.pid"
    if [ -f "$dir/node" ]; then
      find /sys/fs/cgroup/*/"slurm_$(cat "$dir/node")" -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
    ;;
  *)
    echo "usage: $0 start|stop [DIR]" >&2
    exit 2
    ;;
esac
