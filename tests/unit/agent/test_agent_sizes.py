"""What the agent gives a step and keeps of a run for sizing: the framework settings, the
allocator's peak a job reports, and whether its GPU was sampled from start to end."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_plugin.agent.finals import covered, job_summary
from slurm_plugin.agent.framework_env import FRAMEWORK_ENV, framework_env
from slurm_plugin.agent.memory_sources import TorchProbe
from slurm_plugin.agent.state import Assignment
from slurm_plugin.agent.trust import ReportGuard, ReportRejected

SPANK = Path(__file__).resolve().parents[3] / "spank" / "gpupack_spank.c"


def test_the_spank_plugin_sets_the_same_framework_settings_and_keeps_a_users_own():
    text = SPANK.read_text()
    listed = re.search(r"framework_vars\[\] = \{(.*?)\};", text, re.S).group(1)
    assert set(re.findall(r'"([A-Z_]+)"', listed)) == set(FRAMEWORK_ENV)
    assert "spank_setenv(sp, line, eq + 1, 0)" in text  # overwrite=0: the job's own value stands


def test_a_gpu_step_gets_the_settings_and_a_step_without_a_gpu_none():
    assert framework_env(0) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert framework_env(-1) == {}


def test_the_allocators_peak_is_bounded_like_every_report():
    g = ReportGuard()
    assert g.check({"iterations": 1, "alloc_peak_bytes": 4 << 30}, None, None, 0.0, 1.0).alloc_peak_bytes == 4 << 30
    assert g.check({"iterations": 1}, None, None, 0.0, 1.0).alloc_peak_bytes is None
    for bad in (-1, 1.5, True, "4", 1 << 60):
        with pytest.raises(ReportRejected):
            g.check({"iterations": 1, "alloc_peak_bytes": bad}, None, None, 0.0, 1.0)


def _a(**kw) -> Assignment:
    base = dict(job_id=5, node="n1", gpu_index=0, kind="whole", isolation="whole", created_at=100.0,
                started_at=100.0, samples=8, first_sampled_at=101.0, last_sampled_at=130.0)
    base.update(kw)
    return Assignment(**base)


def test_covered_means_sampled_from_the_start_to_the_end_on_a_gpu():
    assert covered(_a(), 131.0)
    assert not covered(_a(first_sampled_at=120.0), 131.0)  # its start unseen
    assert not covered(_a(), 150.0)  # its end unseen
    assert not covered(_a(gpu_index=-1), 131.0)
    assert not covered(_a(samples=1), 131.0)
    summary = job_summary(_a(alloc_peak_bytes=3), "n1", 131.0, "ended")
    assert (summary["covered"], summary["alloc_peak_bytes"]) == (True, 3)


class _Cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def memory_stats(device=None):
        return {"allocated_bytes.all.current": 1 << 30, "allocated_bytes.all.peak": 4 << 30}


class _Torch:
    cuda = _Cuda


def test_the_torch_probe_reports_the_allocated_peak_to_the_agent():
    sent = []
    probe = TorchProbe(torch_module=_Torch)
    env = {"GPUPACK_AGENT_SOCKET": "/run/a.sock", "GPUPACK_REPORT_TOKEN": "tok", "SLURM_JOB_ID": "9"}
    assert probe.report(12, env=env, ask=lambda path, body, t: sent.append((path, body)) or {"status": "ok"})
    assert sent == [("/run/a.sock", {"op": "report", "job_id": 9, "token": "tok", "iterations": 12,
                                     "alloc_peak_bytes": 4 << 30})]
    assert not probe.report(12, env={}, ask=lambda *a: {"status": "ok"})  # not in a gpupack step: nothing sent
