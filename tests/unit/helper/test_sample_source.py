"""The helper reads every agent sample once, even when its rounds are slow."""
from __future__ import annotations

from packer.samples import JobSample
from slurm_plugin.helper.sample_source import AgentSamples


def test_newest_first_then_every_sample_since_the_last_seen(monkeypatch, tmp_path):
    taken = [JobSample(7, "node1", 0, float(t), 1, 1) for t in range(10)]
    asked = []

    def fake_samples(state_dir, node, job_id=None, *, latest=False, since=None, timeout=2.0):
        asked.append((node, latest, since))
        upto = fake_samples.now
        mine = [s for s in taken[:upto] if since is None or s.at > since]
        return mine[-1:] if latest else mine

    monkeypatch.setattr("slurm_plugin.agent.client.samples", fake_samples)
    source = AgentSamples(tmp_path)
    fake_samples.now = 3
    assert [s.at for s in source(["node1"])] == [2.0]  # the newest, the first time
    fake_samples.now = 8  # a slow round: five samples were taken meanwhile
    assert [s.at for s in source(["node1"])] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert [s.at for s in source(["node1"])] == []  # nothing new
    assert asked == [("node1", True, None), ("node1", False, 2.0), ("node1", False, 7.0)]
