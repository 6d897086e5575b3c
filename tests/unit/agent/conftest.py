"""The agent's unit tests run MPS control daemons for real: the dev cluster's stand-in
(`gpus.sim.mps_control`) in place of the driver's `nvidia-cuda-mps-control`, each one
quit when its test ends."""
from __future__ import annotations

import pytest

from gpus.sim.mps_control import STAND_IN, daemon_pid
from slurm_plugin.agent import mps_daemons


@pytest.fixture(autouse=True)
def stand_in_mps_control(monkeypatch, tmp_path):
    monkeypatch.setattr(mps_daemons, "DEFAULT_CONTROL", STAND_IN)
    yield STAND_IN
    for pid_file in tmp_path.rglob(mps_daemons.PID_FILE):
        if daemon_pid(pid_file.parent) is not None:
            mps_daemons.MpsDaemons(pid_file.parents[2], STAND_IN).stop(pid_file.parents[1].name)
