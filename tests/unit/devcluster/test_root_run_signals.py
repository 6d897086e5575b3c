"""`gpupack root run` passes an interrupt or SIGTERM on to the command it runs and waits for
its end: a test run inside a Debian root takes its clusters down (seen: `subprocess.run`
killed the run's pytest with SIGKILL on an interrupt and left three daemons' worth of
cluster behind)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

#: the child: on the signal it "takes its cluster down" (0.5 s), writes that it did, exits 7
CHILD = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(0.5)
    open(sys.argv[1], "w").write(f"stopped on {signum}")
    sys.exit(7)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[2], "w").write("ready")
time.sleep(60)
sys.exit(0)
"""

PARENT = """
import sys
from slurm_plugin.devcluster.roots import run_forwarding
sys.exit(run_forwarding([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_signal_reaches_the_command_and_its_end_is_waited_for(tmp_path, sig):
    done, ready = tmp_path / "done", tmp_path / "ready"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(done), str(ready)], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.time() + 30
    while not ready.exists():
        assert parent.poll() is None and time.time() < deadline, "the command never started"
        time.sleep(0.05)
    parent.send_signal(sig)  # to the parent only, as `kill` or a CI runner's timeout sends it
    assert parent.wait(timeout=30) == 7  # the command's own exit, after its own clean-up
    assert done.read_text() == f"stopped on {int(sig)}"
