"""The holder of one node's host: the first process in the node's network, UTS and mount
namespaces (``unshare --net --uts --mount`` runs it), which makes the node's view of the
files and then waits; the node's daemons are started in its namespaces with ``nsenter``.

Its plan (a JSON file :mod:`slurm_plugin.devcluster.hosts` writes) says what to do:

- the node's hostname, and its own ``/etc/hosts`` and ``/etc/hostname`` (bind-mounted);
- with ``hide_v1_devices``, no cgroup v1 devices hierarchy (a cgroup v2 node on a hybrid host);
- the cluster's state folder becomes a read-only tmpfs holding only what a node of a real
  cluster has: the shared folders (``etc`` and ``spank`` read-only, ``log`` writable, the
  node's own fake device folder), bound from the folder underneath, and empty private
  tmpfs folders (``run``, the slurmd spool, the agent's state, the simulated GPUs). The
  controller's files (the store, the helper's socket, slurmctld's state) and the other
  nodes' are simply not there.

Mount propagation is made private first, so none of this shows outside the node. It prints
``ready`` on stdout when done (or the error, and exits 1), then sleeps until SIGTERM.
Standard library only: it starts once per node and must start fast.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import pwd
import signal
import socket
import sys
from pathlib import Path

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


class HolderError(RuntimeError):
    pass


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype or 'bind'}): {os.strerror(err)}")


def make_private() -> None:
    """Make every mount of this namespace private, so the node's mounts stay its own.

    Inside a Debian root (a chroot) ``/`` is no mount point and cannot be made private;
    the mounts seen there are made private one by one, and the one holding the root (not
    seen from inside) must not be shared, which /proc/1/mountinfo tells."""
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        return
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        _mount(None, line.split()[4].replace("\\040", " "), None, MS_REC | MS_PRIVATE)
    if _root_mount_shared():
        raise HolderError(
            "this machine's mounts are shared (systemd does that) and a node in a Debian root cannot "
            "make the root's own mount private, so its private folders would show on the machine; "
            "use --one-host for this release, or bind the root onto itself as a private mount "
            "(mount --rbind R R; mount --make-rprivate R) before `devcluster up`")


def _root_mount_shared() -> bool:
    """Whether the machine's mount that holds this Debian root is shared (read from
    /proc/1/mountinfo, which names mounts from the machine's /). The root's path comes from
    GPUPACK_ROOT ("<suite> root <path>", set by `--slurm`); without it, any shared mount of
    the root's file system counts."""
    where = os.environ.get("GPUPACK_ROOT", "")
    root_path = where.split(" root ", 1)[1] if " root " in where else None
    dev = os.stat("/").st_dev
    best, shared = "", False
    for line in Path("/proc/1/mountinfo").read_text().splitlines():
        fields, optional = line.split(), line.split(" - ")[0]
        point = fields[4].replace("\\040", " ")
        is_shared = " shared:" in optional
        if root_path is None:
            major, minor = (int(x) for x in fields[2].split(":"))
            if os.makedev(major, minor) == dev and is_shared:
                return True
        elif (root_path == point or root_path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, shared = point, is_shared
    return shared


def hide_v1_devices() -> list[str]:
    """Unmount the cgroup v1 devices hierarchy in this node's (private) mount namespace, so that
    the node's SPANK plugin and agent see a cgroup v2 node on a hybrid host (the plan's
    ``hide_v1_devices``; docs/fence.md). Returns the mount points taken away."""
    gone = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        fs = tail.split()
        if len(fs) >= 3 and fs[0] == "cgroup" and "devices" in fs[2].split(","):
            point = fields.split()[4].replace("\\040", " ")
            if _libc.umount2(point.encode(), MNT_DETACH) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"umount {point}: {os.strerror(err)}")
            gone.append(point)
    return gone


def _bind(source: str, target: Path, read_only: bool) -> None:
    target.mkdir(parents=True, exist_ok=True)
    _mount(source, str(target), None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, str(target), None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _bind_file(text: str, scratch: Path, target: str) -> None:
    scratch.write_text(text)
    os.chmod(scratch, 0o644)
    if not os.path.isfile(target):  # a bind mount needs a file there (a dangling symlink will not do)
        raise HolderError(f"{target} is not a file in this root: cannot give the node its own")
    _mount(str(scratch), target, None, MS_BIND)


def build_view(plan: dict) -> None:
    """The node's view of the state folder and of /etc (see the module's docstring)."""
    state = Path(plan["state_dir"])
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)  # the folder underneath, after the tmpfs covers it
    below = f"/proc/self/fd/{fd}"
    try:
        _mount("gpupack-node", str(state), "tmpfs", 0, "mode=755,size=16m")
        for rel in plan["shared_ro"]:
            _bind(f"{below}/{rel}", state / rel, read_only=True)
        for rel in plan["shared_rw"]:
            _bind(f"{below}/{rel}", state / rel, read_only=False)
        for rel, mode in plan["private"].items():
            target = state / rel
            target.mkdir(parents=True, exist_ok=True)
            _mount("gpupack-node", str(target), "tmpfs", 0, f"mode={mode},size={plan['private_size']}")
        for rel, user in plan["owners"].items():
            (state / rel).mkdir(parents=True, exist_ok=True)
            entry = pwd.getpwnam(user)
            os.chown(state / rel, entry.pw_uid, entry.pw_gid)
        etc = state / plan["etc_scratch"]
        etc.mkdir(parents=True, exist_ok=True)
        _bind_file(plan["hosts"], etc / "hosts", "/etc/hosts")
        _bind_file(plan["hostname"] + "\n", etc / "hostname", "/etc/hostname")
        _mount(None, str(state), None, MS_REMOUNT | MS_RDONLY)  # nothing new at the top
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[1]).read_text())
    try:
        make_private()
        if plan.get("hide_v1_devices"):
            hide_v1_devices()
        socket.sethostname(plan["hostname"])
        build_view(plan)
    except (OSError, HolderError, KeyError) as exc:
        print(f"error: {exc}", flush=True)
        return 1
    os.chdir("/")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the one line is said: let the reader go
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
