"""slurmdbd with MariaDB for the dev cluster (`devcluster up --accounting`): `sacct`,
`sacctmgr` and fair-share as a real site has them.

Both run on the controller's host, from Debian's packages (`mariadb-server`, `slurmdbd`):
a MariaDB of the cluster's own (its data, socket and log in `<state>/mariadb`, listening on
127.0.0.1 at port + 91 only; the machine's own MariaDB service is left alone), and slurmdbd
on port + 90, reached by slurmctld and the client commands (slurm.conf's
AccountingStorage* lines). The database user and its random password are made by MariaDB's
init file at each start; slurmdbd.conf holds the password (0600, SlurmUser's, as slurmdbd
requires). The cluster is added to the database before slurmctld starts.

A MariaDB or slurmdbd that does not start raises `DevClusterError` with the end of its log.
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

from slurm_plugin.devcluster.commands import run_slurm
from slurm_plugin.devcluster.errors import DevClusterError
from slurm_plugin.devcluster.processes import Process, check_started, started_pid
from slurm_plugin.devcluster.spec import DB_PORT_OFFSET, DBD_PORT_OFFSET, ClusterSpec

log = logging.getLogger(__name__)

__all__ = ["PACKAGES", "REQUIRED_FILES", "Accounting"]

PACKAGES = ["mariadb-server", "slurmdbd"]
REQUIRED_FILES = {"mariadb-server": "/usr/sbin/mariadbd", "slurmdbd": "/usr/sbin/slurmdbd"}
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"
READY_TIMEOUT_S = 60


class Accounting:
    """Writes the configs of, starts and waits for the cluster's MariaDB and slurmdbd."""

    def __init__(self, spec: ClusterSpec, slurm_user: str):
        self.spec = spec
        self.slurm_user = slurm_user
        self.dir = spec.state_dir / "mariadb"  # MariaDB's own: data, socket, pid, log (mysql's)

    @property
    def marker(self) -> str:
        return str(self.spec.state_dir)

    # -- files -----------------------------------------------------------------------------
    def write_files(self) -> None:
        s = self.spec
        self.dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(self.dir, "mysql", "mysql")
        os.chmod(self.dir, 0o750)
        password = self._password()
        init = self.dir / "init.sql"  # read by mariadbd itself, as mysql: the database, user and grants
        user = f"'{DB_USER}'@'127.0.0.1'"
        # The database exists before slurmdbd's first connect (as Slurm's accounting guide has
        # the admin create it): slurmdbd would otherwise create it itself after a failed connect
        # and then connect again on the same MYSQL handle, which MariaDB Connector/C 3.4.10
        # (Debian trixie, sid) left with its options cleared; its first query then fails
        # (docs/accounting.md).
        _write_private(init, f"CREATE DATABASE IF NOT EXISTS {DB_NAME};\n"
                             f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{password}';\n"
                             f"ALTER USER {user} IDENTIFIED BY '{password}';\n"
                             f"GRANT ALL ON {DB_NAME}.* TO {user};\n", "mysql")
        _write_private(self.cnf, "\n".join([
            "# Written by `gpupack devcluster up --accounting`: the cluster's own MariaDB.",
            "[mariadbd]", "user=mysql", f"datadir={self.dir / 'data'}", f"socket={self.dir / 'mariadbd.sock'}",
            f"pid-file={self.dir / 'mariadbd.pid'}", f"log-error={self.dir / 'mariadbd.err'}",
            "bind-address=127.0.0.1", f"port={s.port + DB_PORT_OFFSET}", "skip-name-resolve",
            f"init-file={init}", "innodb_buffer_pool_size=128M", "innodb_lock_wait_timeout=900",
            "innodb_flush_log_at_trx_commit=2", "skip-log-bin",
            # on by default from MariaDB 11.6 (trixie, sid: 11.8), which Slurm does not support:
            # slurmdbd stops at the first write that conflicts; `loose-`: 10.11 knows no such option
            "loose-innodb_snapshot_isolation=OFF", "",
        ]), "root")
        _write_private(s.etc / "slurmdbd.conf", "\n".join([
            "# Written by `gpupack devcluster up --accounting`.",
            "AuthType=auth/munge", f"AuthInfo=socket={s.munge_socket}",
            f"DbdHost={socket.gethostname()}", "DbdAddr=127.0.0.1", f"DbdPort={s.port + DBD_PORT_OFFSET}",
            f"SlurmUser={self.slurm_user}", "DebugLevel=info",
            f"LogFile={s.log}/slurmdbd.log", f"PidFile={s.run}/slurmdbd.pid",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
            f"StoragePort={s.port + DB_PORT_OFFSET}", f"StorageUser={DB_USER}", f"StoragePass={password}",
            f"StorageLoc={DB_NAME}", "",
        ]), self.slurm_user)

    @property
    def cnf(self) -> Path:
        return self.spec.etc / "mariadb.cnf"

    def _password(self) -> str:
        path = self.spec.etc / "slurmdbd.password"
        if not path.exists():
            _write_private(path, secrets.token_hex(16), "root")
        return path.read_text().strip()

    # -- processes -------------------------------------------------------------------------
    def start(self, running: dict[tuple[str, str], Process], procs: list[Process], save) -> None:
        """MariaDB, then slurmdbd, then the cluster in the database; what runs is kept."""
        # each is registered as soon as it runs, so that `down` stops it even when it never
        # became ready
        if ("mariadb", "mariadb") not in running:
            self._start_mariadb(procs, save)
        if ("slurmdbd", "slurmdbd") not in running:
            self._start_slurmdbd(procs, save)
        self._add_cluster()

    def _start_mariadb(self, procs: list[Process], save) -> None:
        data = self.dir / "data"
        if not (data / "mysql").is_dir():  # a new cluster: MariaDB's system tables first
            result = subprocess.run(
                ["mariadb-install-db", f"--defaults-file={self.cnf}", "--skip-test-db",
                 "--auth-root-authentication-method=socket"], capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                raise DevClusterError(f"MariaDB could not set up its data in {data} (exit {result.returncode}): "
                                      f"{(result.stderr or result.stdout).strip()[-1500:]}")
        pidfile = self.dir / "mariadbd.pid"
        pidfile.unlink(missing_ok=True)
        proc = subprocess.Popen(["/usr/sbin/mariadbd", f"--defaults-file={self.cnf}"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(Process("mariadb", "mariadb", proc.pid, self.marker, str(pidfile)))
        save(procs)
        port = self.spec.port + DB_PORT_OFFSET
        self._wait(lambda: _listens(port), proc, "MariaDB", self.dir / "mariadbd.err",
                   f"answer on 127.0.0.1:{port}")

    def _start_slurmdbd(self, procs: list[Process], save) -> None:
        s = self.spec
        pidfile = s.run / "slurmdbd.pid"
        pidfile.unlink(missing_ok=True)
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF; it takes no config path, so the
        # state folder is passed as an argument it ignores, for our pid checks
        env = {**os.environ, "SLURM_CONF": str(s.slurm_conf)}
        check_started(subprocess.run(["/usr/sbin/slurmdbd", self.marker], env=env, capture_output=True, text=True),
                      "slurmdbd")
        try:
            pid = started_pid(pidfile, self.marker, "slurmdbd", s.log, timeout=20)
        except DevClusterError as exc:
            raise DevClusterError(f"{exc}\n{_tail(s.log / 'slurmdbd.log')}") from None
        procs.append(Process("slurmdbd", "slurmdbd", pid, self.marker, str(pidfile)))
        save(procs)
        self._wait(lambda: run_slurm(s, "sacctmgr", "-n", "show", "cluster", timeout=10).returncode == 0, None,
                   "slurmdbd", s.log / "slurmdbd.log", "answer sacctmgr")

    def _add_cluster(self) -> None:
        s = self.spec
        if s.cluster_name not in self._cluster_ids():
            added = run_slurm(s, "sacctmgr", "-i", "add", "cluster", s.cluster_name, timeout=20)
            if added.returncode != 0:
                raise DevClusterError(f"sacctmgr could not add the cluster {s.cluster_name}: "
                                      f"{(added.stderr or added.stdout).strip()}")
        self._match_saved_cluster_id(self._cluster_ids().get(s.cluster_name))

    def _cluster_ids(self) -> dict[str, str]:
        """The clusters in the database, name -> id."""
        listed = run_slurm(self.spec, "sacctmgr", "-nP", "show", "cluster", "format=cluster,id", timeout=20)
        pairs = (line.split("|") for line in listed.stdout.splitlines() if line.count("|") == 1)
        return {name: cluster_id for name, cluster_id in pairs}

    def _match_saved_cluster_id(self, db_id: str | None) -> None:
        """slurmctld keeps its cluster id in its state folder (`clustername`, written at its
        first start) and, from Slurm 24.11, refuses to start when slurmdbd gives another
        ("CLUSTER ID MISMATCH"): a cluster that ran without accounting made its own id. The
        database is this cluster's own, so the file goes (the override Slurm names) and
        slurmctld takes the database's id."""
        saved = self.spec.state_dir / "ctld" / "clustername"
        try:
            _, _, saved_id = saved.read_text().strip().partition("|")
        except FileNotFoundError:
            return
        if db_id and saved_id != db_id:
            log.warning("cluster id %s in %s is not the database's %s: slurmctld takes the database's",
                        saved_id, saved, db_id)
            saved.unlink()

    def _wait(self, ready, proc: subprocess.Popen | None, what: str, logfile: Path, doing: str) -> None:
        deadline = time.time() + READY_TIMEOUT_S
        while time.time() < deadline:
            if ready():
                return
            if proc is not None and proc.poll() is not None:
                raise DevClusterError(f"{what} exited at start (exit {proc.returncode}); {_tail(logfile)}")
            time.sleep(0.3)
        raise DevClusterError(f"{what} did not {doing} in {READY_TIMEOUT_S}s; {_tail(logfile)}")


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _tail(logfile: Path) -> str:
    try:
        return f"its log {logfile} ends with:\n{logfile.read_text(errors='replace')[-1500:]}"
    except OSError:
        return f"no log at {logfile}"


def _write_private(path: Path, text: str, owner: str) -> None:
    """A file only `owner` reads (passwords): written whole, 0600, then owned."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    shutil.chown(tmp, owner, owner)
    tmp.replace(path)
