"""The node side of the dev cluster: the SPANK plugin build, the node agents, plugstack.conf.

Called by :mod:`slurm_plugin.devcluster.manager` (build, processes) and
:mod:`slurm_plugin.devcluster.files` (plugstack_lines).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_plugin.devcluster.spec import ClusterSpec

SPANK_SRC = Path(__file__).resolve().parents[2] / "spank"
# How long a step start waits for its node's agent. The plugin's own default (3000 ms) is for a
# real node, whose agent answers in milliseconds. The dev cluster runs every node's agent, the
# GPU stand-ins and their MPS daemons on one machine, often beside other test runs: a MIG step
# whose isolation starts an MPS daemon took over 3 s there at load 10 to 30, and was requeued
# unisolated (fail closed) although nothing was wrong.
AGENT_TIMEOUT_MS = 15000
ISOLATION = "mig"  # the dev cluster's nodes isolate packed jobs with MIG instances
BACKEND = "nvml"  # as on a real node; NVML reaches the simulated GPU


class SpankBuildError(RuntimeError):
    pass


def spank_dir(spec: ClusterSpec) -> Path:
    return spec.state_dir / "spank"


def series() -> str:
    out = subprocess.run(["make", "-s", "-C", str(SPANK_SRC), "series"], capture_output=True, text=True)
    return out.stdout.strip()


def plugin_path(spec: ClusterSpec) -> Path:
    return spank_dir(spec) / f"gpupack_spank-{series()}.so"


def build(spec: ClusterSpec) -> Path:
    """Build the SPANK plugin for the installed Slurm into STATE_DIR/spank."""
    out = spank_dir(spec)
    out.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["make", "-s", "-C", str(SPANK_SRC), f"OUT_DIR={out}"], capture_output=True, text=True)
    if result.returncode != 0:
        raise SpankBuildError(f"building the SPANK plugin in {SPANK_SRC} failed:\n{result.stdout}{result.stderr}")
    return plugin_path(spec)


def processes(spec: ClusterSpec) -> list[tuple[str, str, list[str]]]:
    """The node agents: the agent a real node runs (NVML), its NVML library the simulated
    GPU of the node (``--nvml-library simulated:DIR``, GPUs created on first start)."""
    return [
        ("agent", node, ["agent", "--node", node, "--state-dir", str(spec.state_dir),
                         "--backend", BACKEND, "--nvml-library", f"simulated:{spec.simgpu_dir}",
                         "--gpus", str(spec.gpus_per_node), "--gpu-model", spec.gpu_model,
                         "--isolation", ISOLATION])
        for node in spec.node_names
    ]


def agent_backend(pid: int) -> str | None:
    """The GPU backend a running agent was started with (``--backend``; ``auto`` when not
    given), from its command line; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    if "--backend" in args[:-1]:
        return args[args.index("--backend") + 1]
    return next((a.split("=", 1)[1] for a in args if a.startswith("--backend=")), "auto")


def plugstack_lines(spec: ClusterSpec) -> list[str]:
    sock = spec.run / "agent-%n.sock"
    spool = spec.state_dir / "agent" / "%n" / "unisolated"  # AgentPaths.unisolated: the node's private agent folder
    # required: a plugin that does not load stops every step on the node (never unisolated packed steps)
    return [f"required {plugin_path(spec)} socket={sock} timeout_ms={AGENT_TIMEOUT_MS} spool={spool}"]
