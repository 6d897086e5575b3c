"""The Debian packages the dev cluster needs, and installing those that are missing."""
from __future__ import annotations

import logging
import os
import subprocess
import sysconfig
from pathlib import Path

from slurm_plugin.devcluster.errors import DevClusterError

log = logging.getLogger(__name__)

__all__ = ["APT_PACKAGES", "REQUIRED_FILES", "install_packages", "missing_packages"]

APT_PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge", "libmunge2", "libslurm-dev", "lua-socket", "liblua5.1-0", "gcc", "make", "libc6-dev"]
REQUIRED_FILES = {
    "slurmctld": "/usr/sbin/slurmctld",
    "slurmd": "/usr/sbin/slurmd",
    "slurm-client": "/usr/bin/sbatch",
    "munge": "/usr/sbin/munged",
    # the helper <-> agent link loads it (ctypes); Debian's multiarch folder, e.g. x86_64-linux-gnu
    "libmunge2": f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or 'x86_64-linux-gnu'}/libmunge.so.2",
    "libslurm-dev": "/usr/include/slurm/spank.h",
    "lua-socket": "/usr/share/lua/5.1/socket.lua",
    "gcc": "/usr/bin/gcc",
    "make": "/usr/bin/make",
    "iproute2": "/usr/bin/ip",  # the multi-host layout's bridge and veths
    "util-linux": "/usr/bin/nsenter",  # and its nodes' namespaces (unshare, nsenter)
}
APT_PACKAGES += ["iproute2", "util-linux"]  # the multi-host layout (docs/multi-host.md)


def missing_packages(accounting: bool = False) -> list[str]:
    """The packages of :data:`REQUIRED_FILES` (and with `accounting`, slurmdbd's and
    MariaDB's) whose file is not installed."""
    from slurm_plugin.devcluster import accounting as acct

    required = {**REQUIRED_FILES, **(acct.REQUIRED_FILES if accounting else {})}
    return [pkg for pkg, path in required.items() if not Path(path).exists()]


def install_packages(accounting: bool = False) -> None:
    """Install :data:`APT_PACKAGES` (and with `accounting` slurmdbd and MariaDB) with
    apt-get when any is missing (needs root)."""
    from slurm_plugin.devcluster import accounting as acct

    missing = missing_packages(accounting)
    if not missing:
        return
    if os.geteuid() != 0:
        raise DevClusterError(
            f"missing Debian packages {missing}; run as root, or `apt-get install {' '.join(missing)}`"
        )
    log.warning("installing %s from Debian's packages", " ".join(missing))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # a Debian root's suite may be older than its Release file's validity (sid, unstable)
    subprocess.run(["apt-get", "-o", "Acquire::Check-Valid-Until=false", "update", "-qq"], check=False, env=env)
    result = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES,
         *(acct.PACKAGES if accounting else [])],
        env=env, capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise DevClusterError(f"apt-get install failed:\n{result.stderr[-2000:]}")
