"""The NVIDIA driver's capability files for MIG devices (the ``/dev`` capability interface).

A process uses a MIG device only if it can open the device nodes of its GPU instance's and
compute instance's ``access`` capabilities (NVIDIA MIG user guide, "Device Nodes and
Capabilities"). The driver lists them in proc files:

- ``/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access`` and
  ``.../gi<G>/ci<C>/access``, each with ``DeviceFileMinor: <m>`` (and ``DeviceFileMode``,
  ``DeviceFileModify``);
- ``/proc/driver/nvidia-caps/mig-minors``: every possible one, ``gpu0/gi0/access 3`` ...
  (fixed numbering, :func:`mig_minor`);

and the node of minor ``m`` is ``/dev/nvidia-caps/nvidia-cap<m>``.

:class:`DriverFiles` reads them under a root: ``/`` on a real node, the simulated GPU's
driver folder (``DIR/<node>.driver``) for ``--nvml-library simulated:DIR``, where
:mod:`gpus.sim.caps` writes the same files. The GPU folder is named by the GPU's device
minor (``/dev/nvidia<minor>``, NVML's ``nvmlDeviceGetMinorNumber``), not by NVML's index: the
two differ where the driver numbered its devices in another order than NVML's PCI order, so
the agent asks NVML for the minor (:meth:`gpus.nvml.backend.NvmlBackend.device_minor`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROC_CAPS = Path("proc/driver/nvidia/capabilities")
MIG_MINORS = Path("proc/driver/nvidia-caps/mig-minors")
PROC_DEVICES = Path("proc/devices")
CAPS_DRIVER = "nvidia-caps"  # the capability nodes' character device driver in /proc/devices
DEV_CAPS = Path("dev/nvidia-caps")
GIS_PER_GPU = 15  # gi0..gi14 per GPU in the driver's numbering
CIS_PER_GI = 8  # ci0..ci7 per GPU instance
FIRST_MIG_MINOR = 3  # 1: mig/config, 2: mig/monitor
_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)


class CapError(RuntimeError):
    """A MIG capability file is missing or unreadable; the message says which."""


def mig_minor(gpu: int, gi: int, ci: int | None = None) -> int:
    """The driver's fixed minor of ``gpu<gpu>/gi<gi>/access`` (or ``.../ci<ci>/access``)."""
    if not (0 <= gi < GIS_PER_GPU) or (ci is not None and not 0 <= ci < CIS_PER_GI) or gpu < 0:
        raise ValueError(f"no MIG capability for gpu{gpu}/gi{gi}" + ("" if ci is None else f"/ci{ci}"))
    per_gi = 1 + CIS_PER_GI
    return FIRST_MIG_MINOR + gpu * GIS_PER_GPU * per_gi + gi * per_gi + (0 if ci is None else 1 + ci)


def cap_name(gpu: int, gi: int, ci: int | None = None) -> str:
    """``gpu0/gi1/access`` or ``gpu0/gi1/ci0/access``: the name in mig-minors and under PROC_CAPS
    (with ``mig/`` after the GPU there)."""
    return f"gpu{gpu}/gi{gi}/access" if ci is None else f"gpu{gpu}/gi{gi}/ci{ci}/access"


def parse_minor(text: str, where: str) -> int:
    """The ``DeviceFileMinor`` of an access file's text."""
    m = _MINOR.search(text)
    if m is None:
        raise CapError(f"{where}: no 'DeviceFileMinor: N' line in {text[:200]!r}")
    return int(m.group(1))


def parse_char_major(text: str, driver: str = CAPS_DRIVER) -> int:
    """The major of character device ``driver`` in a ``/proc/devices`` text (its
    ``Character devices:`` section); CapError when it is not listed."""
    section = None
    for line in text.splitlines():
        head = line.strip()
        if head.endswith("devices:"):
            section = head
            continue
        fields = head.split()
        if section == "Character devices:" and len(fields) == 2 and fields[1] == driver and fields[0].isdigit():
            return int(fields[0])
    raise CapError(f"no character device '{driver}' in the driver's devices list")


def parse_mig_minors(text: str) -> dict[str, int]:
    """``name -> minor`` of every MIG access capability in a ``mig-minors`` text (without
    ``config``/``monitor``, which every MIG user needs); CapError on a line that is not
    ``<name> <minor>``."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not fields[1].isdigit():
            raise CapError(f"mig-minors line {n}: expected '<name> <minor>', got {line[:100]!r}")
        if fields[0].endswith("/access"):
            out[fields[0]] = int(fields[1])
    return out


def devices_text(caps_major: int) -> str:
    """A ``/proc/devices`` as a node with the NVIDIA driver shows it (the simulated driver's)."""
    return (f"Character devices:\n  1 mem\n  4 tty\n195 nvidia-frontend\n{caps_major:3d} {CAPS_DRIVER}\n"
            "\nBlock devices:\n  7 loop\n  8 sd\n")


def access_text(minor: int, mode: int = 0o444) -> str:
    """An access file as the driver writes it (mode in decimal, as ``DeviceFileMode: 292``)."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def mig_minors_text(gpus: int | list[int]) -> str:
    """``/proc/driver/nvidia-caps/mig-minors`` for GPU minors ``0..gpus-1`` (or those listed)."""
    lines = ["config 1", "monitor 2"]
    for g in range(gpus) if isinstance(gpus, int) else gpus:
        for gi in range(GIS_PER_GPU):
            lines.append(f"{cap_name(g, gi)} {mig_minor(g, gi)}")
            lines.extend(f"{cap_name(g, gi, ci)} {mig_minor(g, gi, ci)}" for ci in range(CIS_PER_GI))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DriverFiles:
    """The driver's capability files under ``root``."""

    root: Path

    @classmethod
    def for_node(cls, sim_dir: Path | None, node: str) -> DriverFiles:
        """The real driver's (``/``), or the simulated GPU's of ``--nvml-library simulated:DIR``."""
        return cls(Path("/") if sim_dir is None else Path(sim_dir) / f"{node}.driver")

    @property
    def proc_caps(self) -> Path:
        return self.root / PROC_CAPS

    @property
    def dev_caps(self) -> Path:
        return self.root / DEV_CAPS

    @property
    def mig_minors(self) -> Path:
        return self.root / MIG_MINORS

    @property
    def devices(self) -> Path:
        return self.root / PROC_DEVICES

    def caps_major(self) -> int:
        """The major of the capability nodes (``nvidia-caps`` in ``/proc/devices``)."""
        try:
            return parse_char_major(self.devices.read_text())
        except OSError as exc:
            raise CapError(f"cannot read {self.devices} ({exc.strerror})") from exc
        except CapError as exc:
            raise CapError(f"{self.devices}: {exc}") from exc

    def all_mig_minors(self) -> list[int]:
        """Every MIG access capability's minor the driver numbers (``mig-minors``), sorted."""
        try:
            return sorted(set(parse_mig_minors(self.mig_minors.read_text()).values()))
        except OSError as exc:
            raise CapError(f"cannot read {self.mig_minors} ({exc.strerror})") from exc

    def access_file(self, gpu: int, gi: int, ci: int | None = None) -> Path:
        base = self.proc_caps / f"gpu{gpu}" / "mig" / f"gi{gi}"
        return base / "access" if ci is None else base / f"ci{ci}" / "access"

    def device(self, minor: int) -> Path:
        return self.dev_caps / f"nvidia-cap{minor}"

    def mig_devices(self, gpu: int, gi: int, ci: int | None) -> list[Path]:
        """The capability device nodes a process needs to use MIG device gpu/gi/ci (its GPU
        instance's, then its compute instance's); CapError when an access file is missing."""
        out = []
        for c in (None,) if ci is None else (None, ci):
            path = self.access_file(gpu, gi, c)
            try:
                text = path.read_text()
            except OSError as exc:
                raise CapError(f"cannot read {path} ({exc.strerror}): the driver lists no capability "
                               f"for {cap_name(gpu, gi, c)}") from exc
            out.append(self.device(parse_minor(text, str(path))))
        return out
