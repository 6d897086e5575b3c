"""The dev cluster's node agents are the agent of a real node: NVML, over the simulated GPU."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from slurm_plugin.cli.agent_cmd import agent
from slurm_plugin.devcluster.node_side import agent_backend, processes
from slurm_plugin.devcluster.spec import ClusterSpec


def test_agents_run_nvml_over_the_simulated_gpu():
    spec = ClusterSpec(state_dir=Path("/x"), nodes=2)
    rows = processes(spec)
    assert [name for _, name, _ in rows] == spec.node_names
    for _, node, args in rows:
        assert args[args.index("--backend") + 1] == "nvml"
        assert args[args.index("--nvml-library") + 1] == f"simulated:{spec.simgpu_dir}"
        assert "--sim-dir" not in args
        # every option is one the production agent has (no test-only switch)
        params = {opt for p in agent.params for opt in p.opts}
        assert {a for a in args if a.startswith("--")} <= params


def test_status_names_the_backend_from_the_command_line():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)", "agent", "--backend", "nvml"])
    try:
        deadline = time.time() + 5
        while agent_backend(p.pid) != "nvml" and time.time() < deadline:
            time.sleep(0.05)
        assert agent_backend(p.pid) == "nvml"
    finally:
        p.kill()
        p.wait()
    assert agent_backend(p.pid) is None  # gone


def test_agent_help_documents_the_library_option():
    out = CliRunner().invoke(agent, ["--help"]).output
    assert "--nvml-library" in out and "simulated:DIR" in out and "GPUPACK_NVML_LIBRARY" in out


def test_the_clusters_daemons_run_this_checkout_first():
    from slurm_plugin.devcluster.manager import CODE, daemon_pythonpath

    assert (CODE / "slurm_plugin" / "devcluster" / "manager.py").is_file()
    assert daemon_pythonpath({}) == str(CODE)
    assert daemon_pythonpath({"PYTHONPATH": f"/elsewhere:{CODE}:"}) == f"{CODE}:/elsewhere"
