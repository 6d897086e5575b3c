"""The simulated driver's MIG capability files, as the NVIDIA driver keeps them.

Under the node's driver folder (``DIR/<node>.driver``, :meth:`gpus.nvml.caps.DriverFiles.for_node`):
``proc/driver/nvidia-caps/mig-minors`` (the fixed numbering), one
``proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/access`` per GPU and compute
instance that exists (gone with it), and ``dev/nvidia-caps/nvidia-cap<minor>`` files
standing for the device nodes (left in place, as ``nvidia-modprobe`` leaves the nodes it
made). :func:`sync` writes them from the state document whenever the document is saved.

:func:`open_mig_device` is what the CUDA driver does before it uses a MIG device: open its
GPU instance's and compute instance's capability nodes. A process that cannot open them
(a job fenced to its own slice, :mod:`spank/gpupack_spank.c`) cannot use the device.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpus.nvml.caps import CapError, DriverFiles, access_text, mig_minor, mig_minors_text

__all__ = ["CapError", "open_mig_device", "sync", "wanted_caps"]


def wanted_caps(doc: dict) -> frozenset[tuple[int, int, int | None]]:
    """(gpu, gi, ci or None) of every GPU and compute instance in a state document."""
    out: set[tuple[int, int, int | None]] = set()
    for g in doc["gpus"]:
        for rec in g["instances"]:
            out.add((g["index"], rec["gi_id"], None))
            if "cis" in rec:
                cis = [c["ci_id"] for c in rec["cis"]]
            else:  # the simulated-GPU backend's instances: one full-size compute instance
                cis = [rec.get("ci_id") or 0] if rec.get("uuid") else []
            out.update((g["index"], rec["gi_id"], ci) for ci in cis)
    return frozenset(out)


def _write(path: Path, text: str, mode: int = 0o444) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def sync(files: DriverFiles, doc: dict, wanted: frozenset[tuple[int, int, int | None]]) -> None:
    """Make the capability files of ``files.root`` those of the instances in ``doc``."""
    if not files.mig_minors.exists():
        _write(files.mig_minors, mig_minors_text(len(doc["gpus"])))
    for gpu, gi, ci in sorted(wanted, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2])):
        minor = mig_minor(gpu, gi, ci)
        access = files.access_file(gpu, gi, ci)
        if not access.exists():
            _write(access, access_text(minor))
        if not files.device(minor).exists():
            _write(files.device(minor), f"simulated nvidia-cap{minor}\n")
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
    worded as CUDA's refusal when one cannot be opened."""
    try:
        nodes = files.mig_devices(gpu, gi, ci)
    except CapError as exc:
        raise CapError(f"CUDA error: no CUDA-capable device is detected ({device_uuid}: {exc})") from exc
    for node in nodes:
        try:
            fd = os.open(node, os.O_RDONLY)
        except OSError as exc:
            raise CapError(f"CUDA error: no CUDA-capable device is detected ({device_uuid}: cannot open "
                           f"its capability {node}: {exc.strerror})") from exc
        os.close(fd)
