"""`devcluster up --accounting --priority multifactor`: slurm.conf sends accounting to the
cluster's slurmdbd and weighs fair-share; slurmdbd.conf and MariaDB's files are private."""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from slurm_plugin.devcluster import spec as specmod
from slurm_plugin.devcluster.spec import ClusterSpec


def conf(**fields) -> list[str]:
    spec = ClusterSpec(state_dir=Path("/x"), port=18817, **fields)
    return specmod.slurm_conf(spec, "h", "slurm", Path("/e"), 7).splitlines()


def test_the_default_cluster_has_no_accounting_and_basic_priority():
    lines = conf()
    assert "PriorityType=priority/basic" in lines
    assert not [line for line in lines if line.startswith("AccountingStorage")]


def test_accounting_and_multifactor_lines():
    lines = conf(accounting=True, priority="multifactor")
    assert "AccountingStorageType=accounting_storage/slurmdbd" in lines
    assert "AccountingStoragePort=18907" in lines  # the cluster's port + 90: clusters side by side differ
    assert "AccountingStoragePass=/x/run/munge/munge.socket" in lines  # the cluster's munged, not the system's
    assert "PriorityType=priority/multifactor" in lines and "PriorityWeightFairshare=100000" in lines
    assert "PriorityType=priority/basic" not in lines


def test_slurms_default_cred_expire_is_not_written():
    assert "AuthInfo=socket=/x/run/munge/munge.socket,cred_expire=10" in conf()  # the dev cluster's short one
    assert "AuthInfo=socket=/x/run/munge/munge.socket" in conf(cred_expire_s=None)  # Slurm's 120 s


def test_an_unknown_priority_plugin_is_refused():
    with pytest.raises(ValueError, match="--priority must be one of basic, multifactor"):
        ClusterSpec(priority="fairshare")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/mariadbd"),
                    reason="chowns to mysql and slurm: needs root and mariadb-server")
def test_slurmdbd_conf_and_the_database_password_are_private(tmp_path):
    from slurm_plugin.devcluster.accounting import Accounting

    spec = ClusterSpec(state_dir=tmp_path / "dc", port=23999, accounting=True)
    spec.etc.mkdir(parents=True)
    Accounting(spec, "slurm").write_files()
    dbd = spec.etc / "slurmdbd.conf"
    assert stat.S_IMODE(dbd.stat().st_mode) == 0o600 and pwd.getpwuid(dbd.stat().st_uid).pw_name == "slurm"
    password = (spec.etc / "slurmdbd.password").read_text().strip()
    assert len(password) == 32 and f"StoragePass={password}" in dbd.read_text()
    init = spec.state_dir / "mariadb" / "init.sql"
    assert stat.S_IMODE(init.stat().st_mode) == 0o600 and pwd.getpwuid(init.stat().st_uid).pw_name == "mysql"
    # the database is there before slurmdbd's first connect (it never reconnects on a failed
    # handle, which Connector/C 3.4.10 leaves unusable: error 5027 on the first query)
    assert init.read_text().splitlines()[0] == "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
    cnf = (spec.etc / "mariadb.cnf").read_text().splitlines()
    assert "port=24090" in cnf and "loose-innodb_snapshot_isolation=OFF" in cnf  # Slurm does not support it
    Accounting(spec, "slurm").write_files()  # again: the same password
    assert (spec.etc / "slurmdbd.password").read_text().strip() == password


def test_a_cluster_id_saved_without_accounting_gives_way_to_the_databases(tmp_path):
    """Slurm 24.11's slurmctld refuses to start when its saved cluster id (made when the cluster
    ran without accounting) is not slurmdbd's: the saved one goes, the database's is taken."""
    from slurm_plugin.devcluster.accounting import Accounting

    spec = ClusterSpec(state_dir=tmp_path / "dc", port=23999, accounting=True)
    saved = spec.state_dir / "ctld" / "clustername"
    saved.parent.mkdir(parents=True)
    saved.write_text("gpupack|1330")
    accounting = Accounting(spec, "slurm")
    accounting._match_saved_cluster_id("1330")
    assert saved.exists()  # the same id: kept
    accounting._match_saved_cluster_id("627")
    assert not saved.exists()
    accounting._match_saved_cluster_id("627")  # no file (a new cluster): nothing to do
