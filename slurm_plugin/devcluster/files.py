"""The dev cluster's files: slurm.conf, gres.conf, cgroup.conf, plugstack.conf, the epilog,
the submit shim, gpupack.toml, the munge key and the fake /dev/nvidiaN of each node."""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import sys
from importlib import resources
from pathlib import Path

from slurm_plugin.devcluster import node_side
from slurm_plugin.devcluster import spec as specmod
from slurm_plugin.devcluster.errors import DevClusterError
from slurm_plugin.devcluster.spec import ClusterSpec

__all__ = ["ctld_python", "plugstack_conf", "slurm_release", "slurm_user", "write_files"]

#: the controller epilog's interpreter where SlurmUser may not run the cluster's own (under /root)
SYSTEM_PYTHON = "/usr/bin/python3"


def write_files(s: ClusterSpec) -> bool:
    """Write every config; True when slurm.conf or gres.conf changed (daemons must restart)."""
    user = slurm_user()
    _make_dirs(s, user)
    shares, mem_gib = _shares_and_memory(s)
    epilog = s.etc / "epilog.sh"
    # the interpreter the cluster was brought up with (the checkout's venv under `make`), as
    # the installed suite's scripts run its venv's (etc/gpupack-epilog.sh)
    _write(epilog, _epilog_script(s, "epilog", f'"{sys.executable}" -m slurm_plugin epilog'), mode=0o755)
    # slurmctld runs it as SlurmUser: the standard-library module, on that interpreter too where
    # SlurmUser may run it
    _write(s.etc / "ctld-epilog.sh",
           _epilog_script(s, "ctld-epilog", f'"{ctld_python(user)}" -m slurm_plugin.ctld_epilog'), mode=0o755)
    changed = _write(
        s.slurm_conf, specmod.slurm_conf(s, socket.gethostname(), user, epilog, shares)
    )
    changed |= _write(s.etc / "gres.conf", specmod.gres_conf(s, shares))
    changed |= _write(s.etc / "cgroup.conf", specmod.cgroup_conf(slurm_release()))
    changed |= _write(s.etc / "plugstack.conf", plugstack_conf(s))
    lua = resources.files("slurm_plugin").joinpath("job_submit.lua").read_text()
    _write(s.etc / "job_submit.lua", lua)
    _write(s.etc / "gpupack_shim.conf", specmod.shim_conf(s))
    _write(s.gpupack_toml, specmod.gpupack_toml(s, shares, mem_gib))
    _write_munge_key(s)
    _make_devices(s)
    if s.accounting:
        from slurm_plugin.devcluster.accounting import Accounting

        Accounting(s, user).write_files()
    return changed


def ctld_python(user: str, python: str | None = None) -> str:
    """The interpreter of the controller epilog, which slurmctld runs as ``user``: ``python``
    (default: this one, ``sys.executable``) when ``user`` may run it, i.e. root, or every folder
    on its way and the file itself open to others; else the system's, with the checkout on
    PYTHONPATH (the module needs the standard library only)."""
    python = python or sys.executable
    if user == "root" or _open_to_others(Path(python)):
        return python
    return SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else python


def _open_to_others(path: Path) -> bool:
    """Whether a user other than the owner may run ``path``: the file its symlinks lead to, and
    every folder on the way to it and to the link itself, open to others."""
    real = path.resolve()
    try:
        folders = {*path.absolute().parents, *real.parents}
        return bool(os.stat(real).st_mode & stat.S_IXOTH) and all(os.stat(f).st_mode & stat.S_IXOTH for f in folders)
    except OSError:
        return False


def slurm_user() -> str:
    """SlurmUser: `slurm` where Debian's packages made it, else root."""
    return "slurm" if _user_exists("slurm") else "root"


def slurm_release() -> tuple[int, int, int]:
    """The installed Slurm release as numbers, e.g. (24, 11, 5), read from libslurm-dev's header."""
    from slurm_plugin.devcluster.roots import installed_release

    text = installed_release(Path("/"))
    if text is None:
        raise DevClusterError("no Slurm installed (slurm/slurm_version.h missing): install libslurm-dev")
    parts = [int(p) for p in text.split("-")[0].split(".")[:3]]
    major, minor, micro = (parts + [0, 0, 0])[:3]
    return major, minor, micro


def plugstack_conf(spec: ClusterSpec) -> str:
    lines = ["# Written by `gpupack devcluster up`."]
    return "\n".join(lines + node_side.plugstack_lines(spec)) + "\n"


def _make_dirs(s: ClusterSpec, slurm_user: str) -> None:
    """The state folder's folders, owned by who writes in them."""
    spools = [s.state_dir / "spool" / node for node in s.node_names]  # slurmd 23.11+ does not make it
    for d in (s.etc, s.run, s.log, s.state_dir / "ctld", s.run / "munge", s.simgpu_dir, *spools):
        d.mkdir(parents=True, exist_ok=True)
    for d in (s.state_dir, s.etc, s.run, s.log, s.state_dir / "ctld", *spools):
        os.chmod(d, 0o755)  # as Slurm's own: its owner writes, everyone reads; no world-writable folder
    for d in (s.state_dir / "ctld", s.log):  # slurmctld (SlurmUser) writes its state and log; root the rest
        shutil.chown(d, slurm_user, slurm_user)
    shutil.chown(s.run / "munge", "munge", "munge")
    os.chmod(s.run / "munge", 0o755)  # munged requires its socket folder searchable by all
    # jobs of any user report their simulated GPU memory here: writable by all, as /tmp, with
    # the sticky bit (no one removes or replaces another's files)
    os.chmod(s.simgpu_dir, 0o1777)


def _shares_and_memory(s: ClusterSpec) -> tuple[int, float]:
    """The model's shares per GPU (its share ladder: every combination places) and memory."""
    from mig.catalog import load_catalog
    from mig.share_ladder import model_ladder

    return model_ladder(s.gpu_model).shares_per_gpu, load_catalog(s.gpu_model).memory_mib / 1024


def _write_munge_key(s: ClusterSpec) -> None:
    key = s.etc / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    shutil.chown(key, "munge", "munge")
    os.chmod(key, 0o600)


def _make_devices(s: ClusterSpec) -> None:
    for node in s.node_names:
        dev = s.device_dir(node)
        dev.mkdir(parents=True, exist_ok=True)
        for g in range(s.gpus_per_node):
            path = dev / f"nvidia{g}"
            if not path.exists():
                # a character device like the real /dev/nvidiaN (major 195), never opened
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, g))


def _epilog_script(spec: ClusterSpec, name: str, command: str) -> str:
    # slurmd and slurmctld run their epilogs with a bare environment: name where this code
    # lives, so the same checkout answers in a Debian root (where it is not pip-installed) as on
    # the host. The log is used when the epilog's user may write it.
    code = Path(__file__).resolve().parents[2]
    log = f"{spec.log}/{name}.log"
    return (
        "#!/bin/sh\n"
        f"# gpupack dev cluster {name} (see `gpupack {name} -h`). It never fails.\n"
        f'LOG="{log}"; [ -w "$LOG" ] || [ -w "{spec.log}" ] || LOG=/dev/null\n'
        f'PYTHONPATH="{code}${{PYTHONPATH:+:$PYTHONPATH}}" {command} --config "{spec.gpupack_toml}" >>"$LOG" 2>&1 || true\n'
        "exit 0\n"
    )


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _write(path: Path, text: str, mode: int = 0o644) -> bool:
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    tmp.replace(path)
    return True
