"""How a `Monitor` is put together: its Slurm runner, its link to the node agents and their
samples, and its watches in the order of a round (the list `monitor.py`'s docstring names).

The Monitor runs rounds; what it runs them with is built here, once, at its start.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from slurm_plugin.agent.client import helper_link, node_facts
from slurm_plugin.config.bounds import RetentionSettings
from slurm_plugin.config.whole import load_agent_settings
from slurm_plugin.helper.agreement import Agreement, expected_from
from slurm_plugin.helper.retention import JobMemory, RetentionWatch
from slurm_plugin.helper.sample_source import AgentSamples, SampleSource
from slurm_plugin.helper.watches.at_head import KeepAtHeadWatch
from slurm_plugin.helper.watches.contention import ContentionWatch
from slurm_plugin.helper.watches.dispatch import DispatchWatch
from slurm_plugin.helper.watches.dispatch_pack import PackAtDispatchWatch
from slurm_plugin.helper.watches.grow import GrowWatch
from slurm_plugin.helper.watches.grow_release import GrowReleaseWatch
from slurm_plugin.helper.watches.history import HistoryWatch
from slurm_plugin.helper.watches.layouts import QueueLayoutWatch
from slurm_plugin.helper.watches.memory import MemoryWatch
from slurm_plugin.helper.watches.metrics import MetricsWatch
from slurm_plugin.helper.watches.mps import MpsWatch
from slurm_plugin.helper.watches.oom import OomWatch
from slurm_plugin.helper.watches.outcomes import OutcomeWatch
from slurm_plugin.helper.watches.quirk_guard import QuirkGuardWatch
from slurm_plugin.helper.watches.regroup import RegroupWatch
from slurm_plugin.helper.watches.round import Watch
from slurm_plugin.helper.watches.run_curves import keep_curve
from slurm_plugin.helper.watches.steering import SteerWatch
from slurm_plugin.helper.watches.track_watch import TrackWatch
from slurm_plugin.helper.watches.unisolated import UnisolatedWatch


def default_runner(paths: Any) -> Any:
    """The Slurm commands' adapter for the cluster `paths` names (its slurm.conf, if any)."""
    from slurm_plugin.slurm.runner import SlurmRunner

    return SlurmRunner(slurm_conf=str(paths.slurm_conf) if paths.slurm_conf else None, timeout=10)


def agent_state_dir(paths: Any) -> Path:
    """Node-local files of the agents, where a tool still reads them: GPUPACK_AGENT_STATE_DIR,
    else `[paths] agent_dir`, else the database's folder."""
    return Path(os.environ.get("GPUPACK_AGENT_STATE_DIR") or getattr(paths, "agent_dir", None)
                or Path(paths.database).parent)


@dataclass
class AgentWiring:
    """The MUNGE-authenticated link to every agent, the facts each must agree on, and the samples."""

    agents: Any
    agreement: Agreement
    samples: SampleSource


def wire_agents(config_path: Any, paths: Any, settings_file: Any, config: Callable[[], Any],
                runner_of: Callable[[], Any], samples: SampleSource | None) -> AgentWiring:
    """Every agent reached over the link ([agent], [agents] of gpupack.toml); shares per GPU, GPU
    type and versions checked with each (nodes that disagree: stale); `samples`: given, or the
    agents' own, stale after `[agent] stale_after_s`."""
    agents = helper_link(config_path, paths, runner_of)
    agreement = Agreement(lambda node: node_facts(agents, node), lambda: expected_from(config()))
    if samples is None:
        agent_settings = settings_file().agent if settings_file is not None else load_agent_settings(config_path)
        samples = AgentSamples(agents, agent_settings.stale_after_s, agreement=agreement)
    return AgentWiring(agents, agreement, samples)


def retention_settings(settings_file: Any) -> RetentionSettings:
    """`[retention]` as gpupack.toml holds it now (defaults without a file)."""
    return settings_file().retention if settings_file is not None else RetentionSettings()


def build_watches(monitor: Any, retention: RetentionSettings) -> list[Watch]:
    """The watches of a round, in its order. `monitor`: the `Monitor` being built (not imported
    here: the monitor imports this module). The ones others reach by name are kept on it too (`quirk_guard_watch`, `mps_watch`, `metrics_watch`, `unisolated_watch`,
    `retention_watch`); the retention watch forgets, in every watch's own per-job maps
    (`monitor.job_maps`), the jobs Slurm no longer lists."""
    monitor.quirk_guard_watch = QuirkGuardWatch()
    monitor.mps_watch = MpsWatch()
    monitor.metrics_watch = MetricsWatch(monitor)
    monitor.unisolated_watch = UnisolatedWatch(lambda: getattr(monitor.samples_source, "unisolated", {}))
    monitor.retention_watch = RetentionWatch(retention, JobMemory(monitor.job_maps, retention.forget_jobs_after_s))
    return [
        TrackWatch(on_run_ended=keep_curve),
        OutcomeWatch(),
        HistoryWatch(),
        monitor.quirk_guard_watch,
        OomWatch(lambda: getattr(monitor.samples_source, "oom_ends", {})),
        ContentionWatch(),
        GrowReleaseWatch(),
        GrowWatch(),
        MemoryWatch(),
        RegroupWatch(),
        monitor.unisolated_watch,
        KeepAtHeadWatch(),
        DispatchWatch(),
        PackAtDispatchWatch(),
        SteerWatch(),
        monitor.mps_watch,
        QueueLayoutWatch(),
        monitor.retention_watch,
        monitor.metrics_watch,
    ]
