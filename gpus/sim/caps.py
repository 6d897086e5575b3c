"""The simulated driver's MIG capability files, as the NVIDIA driver keeps them.

Under the node's driver folder (``DIR/<node>.driver``, :meth:`gpus.nvml.caps.DriverFiles.for_node`):
``proc/driver/nvidia-caps/mig-minors`` (the fixed numbering), one
``proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/access`` per GPU and compute
instance that exists (gone with it), ``proc/devices`` (the ``nvidia-caps`` major,
:data:`SIM_CAPS_MAJOR`) and ``dev/nvidia-caps/nvidia-cap<minor>``: character device nodes of
that major (left in place, as ``nvidia-modprobe`` leaves the nodes it made), so the kernel's
device cgroup checks every open of them as on a real node. No driver serves the major: an
open the device cgroup allows fails with ENXIO, one it denies with EPERM. Where no device
node can be made or opened (no ``CAP_MKNOD``, a ``nodev`` mount) they are regular files, and
the log says so. :func:`sync` writes them from the state document whenever it is saved.

:func:`open_mig_device` is what the CUDA driver does before it uses a MIG device: open its
GPU instance's and compute instance's capability nodes. A process that cannot open them
(a job fenced to its own slice, :mod:`spank/gpupack_spank.c`) cannot use the device.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
from pathlib import Path

from gpus.nvml.caps import CapError, DriverFiles, access_text, devices_text, mig_minor, mig_minors_text

log = logging.getLogger(__name__)
# the simulated nvidia-caps major: in 60-63, "LOCAL/EXPERIMENTAL USE" (Documentation/admin-guide/
# devices.txt), never handed to a driver, so no open of a node reaches one
SIM_CAPS_MAJOR = 61
# errors of an open of a capability node that the kernel let through to the (absent) driver
NO_DRIVER = (errno.ENXIO, errno.ENODEV)

__all__ = ["CapError", "device_minor", "open_mig_device", "sync", "wanted_caps"]


def device_minor(g: dict) -> int:
    """A simulated GPU's device minor (``/dev/nvidia<minor>``, NVML's nvmlDeviceGetMinorNumber),
    which names its folder in the driver's capability files; state files from before it was
    kept: the index."""
    return int(g.get("minor", g["index"]))


def wanted_caps(doc: dict) -> frozenset[tuple[int, int, int | None]]:
    """(gpu, gi, ci or None) of every GPU and compute instance in a state document, the GPU named
    by its device minor, as the driver's capability files name it."""
    out: set[tuple[int, int, int | None]] = set()
    for g in doc["gpus"]:
        minor = device_minor(g)
        for rec in g["instances"]:
            out.add((minor, rec["gi_id"], None))
            if "cis" in rec:
                cis = [c["ci_id"] for c in rec["cis"]]
            else:  # the simulated-GPU backend's instances: one full-size compute instance
                cis = [rec.get("ci_id") or 0] if rec.get("uuid") else []
            out.update((minor, rec["gi_id"], ci) for ci in cis)
    return frozenset(out)


def _write(path: Path, text: str, mode: int = 0o444) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _make_node(path: Path, minor: int) -> bool:
    """A character device node (SIM_CAPS_MAJOR, minor) at ``path`` (in place of a regular file
    an older simulated driver left); False (and nothing made) where the kernel will not make
    one, or will not open one there (a nodev mount)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if os.path.lexists(tmp):
        tmp.unlink()
    try:
        os.mknod(tmp, 0o444 | stat.S_IFCHR, os.makedev(SIM_CAPS_MAJOR, minor))
    except OSError as exc:
        log.warning("simulated GPU: cannot make the device node %s (%s); its capability nodes are "
                    "regular files, which no device cgroup fences", path, exc.strerror)
        return False
    try:
        os.close(os.open(tmp, os.O_RDONLY))
    except OSError as exc:
        if exc.errno not in NO_DRIVER and exc.errno != errno.EPERM:  # EPERM: this process's device cgroup
            tmp.unlink()
            log.warning("simulated GPU: cannot open the device node %s (%s: a nodev mount?); its "
                        "capability nodes are regular files, which no device cgroup fences", path, exc.strerror)
            return False
    os.replace(tmp, path)
    return True


def sync(files: DriverFiles, doc: dict, wanted: frozenset[tuple[int, int, int | None]]) -> None:
    """Make the capability files of ``files.root`` those of the instances in ``doc``."""
    if not files.mig_minors.exists():
        _write(files.mig_minors, mig_minors_text(sorted(device_minor(g) for g in doc["gpus"])))
    if not files.devices.exists():
        _write(files.devices, devices_text(SIM_CAPS_MAJOR))
    nodes = True
    for gpu, gi, ci in sorted(wanted, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2])):
        minor = mig_minor(gpu, gi, ci)
        access = files.access_file(gpu, gi, ci)
        if not access.exists():
            _write(access, access_text(minor))
        node = files.device(minor)
        if node.is_char_device() or (nodes and (nodes := _make_node(node, minor))):
            continue
        if not os.path.lexists(node):
            _write(node, f"simulated nvidia-cap{minor}\n")
    gis = {(g, i) for g, i, _ in wanted}
    for gpu_dir in files.proc_caps.glob("gpu*"):
        gpu = int(gpu_dir.name[3:])
        for gi_dir in (gpu_dir / "mig").glob("gi*"):
            gi = int(gi_dir.name[2:])
            if (gpu, gi) not in gis:
                shutil.rmtree(gi_dir, ignore_errors=True)
                continue
            for ci_dir in gi_dir.glob("ci*"):
                if (gpu, gi, int(ci_dir.name[2:])) not in wanted:
                    shutil.rmtree(ci_dir, ignore_errors=True)


def open_mig_device(files: DriverFiles, gpu: int, gi: int, ci: int | None, device_uuid: str) -> None:
    """Open the capability nodes of MIG device gpu/gi/ci as CUDA does; raises CapError
    worded as CUDA's refusal when one cannot be opened (missing, EACCES, or EPERM from the
    device cgroup); ENXIO/ENODEV count as reached (the simulated nodes have no driver)."""
    try:
        nodes = files.mig_devices(gpu, gi, ci)
    except CapError as exc:
        raise CapError(f"CUDA error: no CUDA-capable device is detected ({device_uuid}: {exc})") from exc
    for node in nodes:
        try:
            os.close(os.open(node, os.O_RDONLY))
        except OSError as exc:
            if exc.errno in NO_DRIVER:  # the kernel let it through: no driver sits behind a simulated node
                continue
            raise CapError(f"CUDA error: no CUDA-capable device is detected ({device_uuid}: cannot open "
                           f"its capability {node}: {exc.strerror})") from exc
