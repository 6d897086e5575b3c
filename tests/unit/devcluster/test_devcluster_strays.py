"""What still runs from a cluster's state folder once its processes are stopped
(`processes.holding`): found by the folder in its command line, never this process or its
parents, never a folder that only shares the name's start."""
from __future__ import annotations

import subprocess
import sys
import time

from slurm_plugin.devcluster.processes import holding, terminate


def sleeper(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv])


def test_a_process_naming_a_path_in_the_folder_is_found_and_stopped(tmp_path):
    state = tmp_path / "gpupack-test-28000-abc"
    inside = sleeper("-f", str(state / "etc" / "slurm.conf"))  # as a re-executed slurmctld's
    beside = sleeper("-f", str(tmp_path / "gpupack-test-28000-abcd" / "etc" / "slurm.conf"))
    try:
        deadline = time.time() + 10
        while inside.pid not in holding(str(state)) and time.time() < deadline:
            time.sleep(0.05)
        assert holding(str(state)) == [inside.pid]  # not the folder whose name only starts the same
        terminate(inside.pid, str(state))
        assert inside.wait(timeout=10) is not None and holding(str(state)) == []
    finally:
        for p in (inside, beside):
            p.kill()
            p.wait()


def test_never_this_process_or_its_parents(tmp_path):
    state = tmp_path / "state"
    # this interpreter's own command line names the folder, as `gpupack devcluster down --state-dir` does
    code = ("import sys; from slurm_plugin.devcluster.processes import holding; "
            f"print(holding({str(state)!r}))")
    out = subprocess.run([sys.executable, "-c", code, str(state / "x")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
