#!/bin/bash
# Give a running dev cluster accounting for the recording only (inside a release's root):
#   accounting.sh up STATE_DIR DB_PORT DBD_PORT    mariadb + slurmdbd on private ports, slurm.conf
#                                                  pointed at it, `scontrol reconfigure`
#   accounting.sh down STATE_DIR                   stop slurmdbd and mariadb (started here)
# Needs `apt-get install mariadb-server slurmdbd` in the root (not part of the project's roots).
set -eu
cmd=$1 dir=$2
acct=$dir/acct
case $cmd in
up)
    dbport=$3 dbdport=$4
    mkdir -p "$acct/db" "$acct/log"
    if [ ! -d "$acct/db/mysql" ]; then
        mariadb-install-db --user=root --datadir="$acct/db" --auth-root-authentication-method=normal >"$acct/log/install.log" 2>&1
    fi
    [ -s "$acct/mariadb.pid" ] && kill -0 "$(cat "$acct/mariadb.pid")" 2>/dev/null ||
    mariadbd --user=root --datadir="$acct/db" --port="$dbport" --bind-address=127.0.0.1 \
        --socket="$acct/mysql.sock" --pid-file="$acct/mariadb.pid" --log-error="$acct/log/mariadb.err" \
        --skip-log-bin >/dev/null 2>&1 &
    for _ in $(seq 60); do [ -S "$acct/mysql.sock" ] && break; sleep 0.5; done
    auth=$(grep '^AuthInfo=' "$dir/etc/slurm.conf")
    cat >"$acct/slurmdbd.conf" <<EOF
AuthType=auth/munge
$auth
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbdport
SlurmUser=slurm
PidFile=$acct/slurmdbd.pid
LogFile=$acct/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=root
StorageLoc=gpupack_acct
EOF
    chown slurm "$acct/slurmdbd.conf" "$acct/log" "$acct"
    chmod 600 "$acct/slurmdbd.conf"
    SLURM_CONF=$acct/slurm.conf slurmdbd  # it reads slurmdbd.conf beside SLURM_CONF
    for _ in $(seq 60); do [ -s "$acct/slurmdbd.pid" ] && break; sleep 0.5; done
    sleep 2
    conf=$dir/etc/slurm.conf
    sed -i '/^AccountingStorage/d; /^JobAcctGatherType/d; /^JobCompType/d' "$conf"
    cat >>"$conf" <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbdport
AccountingStoragePass=$(sed -n 's/^AuthInfo=.*socket=\([^,]*\).*/\1/p' "$conf")
JobAcctGatherType=${GATHER:-jobacct_gather/linux}
EOF
    sacctmgr -i add cluster "$(sed -n 's/^ClusterName=//p' "$conf")" || true
    scontrol reconfigure
    sleep 3
    sacctmgr -n show cluster format=cluster,controlhost,controlport
    ;;
down)
    [ -s "$acct/slurmdbd.pid" ] && kill "$(cat "$acct/slurmdbd.pid")" || true
    sleep 1
    [ -s "$acct/mariadb.pid" ] && kill "$(cat "$acct/mariadb.pid")" || true
    ;;
esac
