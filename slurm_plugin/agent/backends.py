"""Which GPU backend the node agent runs, and which ``libnvidia-ml`` NVML uses.

- ``auto`` (the default): NVML, where the library loads; otherwise the agent refuses to
  start, saying so (a node agent that silently ran a simulated GPU would hand packed jobs
  made-up devices);
- ``nvml``: NVML, or the reason it cannot be opened;
- ``sim``: the simulated-GPU backend (:class:`gpus.sim.backend.SimGpuBackend`), for unit
  tests and the offline simulator.

The library NVML calls (``--nvml-library``, or ``GPUPACK_NVML_LIBRARY``) is the driver's
``libnvidia-ml.so.1`` by default, another file by path, or ``simulated:DIR``: the simulated
GPU of this node kept in ``DIR`` (:class:`gpus.sim.nvml.SimulatedNvml`), which is
how the dev cluster runs the same agent as a real node.
"""
from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mig.errors import MigError

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nvml", "sim")
SIMULATED = "simulated:"


class BackendChoiceError(RuntimeError):
    """The backend asked for cannot run here; the message says what to do."""


@dataclass(frozen=True)
class OpenedBackend:
    backend: Any  # a mig.backend.GpuBackend
    name: str  # "nvml" | "sim"
    sim_dir: Path | None  # the simulated GPU's folder (steps get it), None on real GPUs


def load_nvml_library(spec: str, node: str, gpus: list[str], mig_enabled: bool) -> Path | None:
    """Point pynvml at the library ``spec`` names, before NVML is initialised; returns the
    simulated GPU's folder for ``simulated:DIR`` (its GPUs created from ``gpus`` when the
    node has none yet)."""
    if spec.startswith(SIMULATED):
        directory = spec[len(SIMULATED):]
        if not directory:
            raise BackendChoiceError(f"--nvml-library {spec!r}: name the simulated GPU's folder, "
                                     f"simulated:DIR")
        from gpus.sim.nvml import SimulatedNvml, install

        install(SimulatedNvml(Path(directory), node, gpus=gpus, mig_enabled=mig_enabled))
        return Path(directory)
    from gpus.nvml.session import import_pynvml

    pynvml = import_pynvml()
    try:
        pynvml.nvmlLib = ctypes.CDLL(spec)
    except OSError as exc:
        raise BackendChoiceError(f"--nvml-library {spec}: cannot load it ({exc})") from exc
    return None


def open_backend(kind: str, library: str | None, node: str, sim_dir: Path, gpus: list[str],
                 mig_enabled: bool, dcgmi: str | None = None) -> OpenedBackend:
    """The agent's GPU backend (see the module docstring); ``dcgmi``: the command that reads
    DCGM's activity per MIG instance for the NVML backend (None: none). Raises
    BackendChoiceError."""
    if kind not in BACKENDS:
        raise BackendChoiceError(f"--backend must be one of {', '.join(BACKENDS)}, not {kind!r}")
    if kind == "sim":
        if library:
            raise BackendChoiceError("--nvml-library goes with the NVML backend, not --backend sim")
        from gpus.sim.backend import SimGpuBackend

        try:
            return OpenedBackend(SimGpuBackend(sim_dir, node, gpus=gpus, mig_enabled=mig_enabled), "sim", sim_dir)
        except MigError as exc:
            raise BackendChoiceError(f"cannot open the simulated GPU in {sim_dir}: {exc}") from exc
    simulated = load_nvml_library(library, node, gpus, mig_enabled) if library else None
    from gpus.nvml.backend import NvmlBackend

    from gpus.dcgm.dcgmi import DcgmiActivity

    try:
        backend = NvmlBackend(dcgm=DcgmiActivity(dcgmi) if dcgmi else None)
    except (MigError, ImportError) as exc:
        if kind == "auto":
            raise BackendChoiceError(
                f"no NVIDIA GPU to run: NVML does not load on this node ({exc}). The agent runs "
                f"the node's real GPUs; for the simulated GPU say so: `--nvml-library "
                f"simulated:DIR` (or `--backend sim`)") from exc
        raise BackendChoiceError(f"cannot open NVML: {exc}") from exc
    log.info("GPU backend: NVML over %s", f"the simulated GPU in {simulated}" if simulated
             else library or "the driver's libnvidia-ml.so.1")
    return OpenedBackend(backend, "nvml", simulated)
