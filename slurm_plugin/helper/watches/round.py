"""What one monitor round gives a watch to read, and the state kept between rounds.

A watch is a small object with one duty and one method, `round(ctx)`. It reads the round
(`RoundContext`: the jobs Slurm listed, the newest samples, the time, the settings), decides
through `ctx.rules` (`packer.rules.SuiteRules`: the decisions the simulator makes too) and acts
only through `ctx.actions` (requeue at the head, update a job, log an event). The monitor
calls the watches in the order of its list, once per round.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from packer.config import PackerConfig
from packer.rules import SuiteRules
from packer.samples import JobSample
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.helper.watches.actions import Actions
from slurm_plugin.helper.watches.state import WatchState
from slurm_plugin.helper.watches.tracks import Track
from slurm_plugin.slurm.model import Job


@dataclass
class RoundContext:
    """One round, as every watch sees it."""

    now: float
    jobs: dict[int, Job]
    samples: list[JobSample]
    settings: MonitorSettings
    config: PackerConfig
    state: WatchState
    actions: Actions
    fingerprint_of: Callable[[Job], str | None]
    agent_state_dir: Path
    gpu_model: str = "H100-80GB"
    agents: object = None  # the AgentLink to every node agent (slurm_plugin.agent.client)
    stale_nodes: dict[str, str] = field(default_factory=dict)  # node -> why its figures are stale
    acted: set[int] = field(default_factory=set)  # jobs requeued this round (the listing predates it)
    act_s: float = 0.0  # the time to act: until the next round (the last round and its pause), and the action's own
    # the decisions (packer.rules): the monitor's one object; None builds it from settings and config
    rules: SuiteRules | None = None

    def __post_init__(self) -> None:
        if self.rules is None:
            self.rules = self.settings.rules(self.config)

    @property
    def enforcing(self) -> bool:
        return self.config.mode == "enforce"

    @property
    def tracks(self) -> dict[int, Track]:
        return self.state.tracks


class Watch(Protocol):
    """One duty of the monitor, run once per round."""

    name: str

    def round(self, ctx: RoundContext) -> None: ...


@runtime_checkable
class KeepsJobs(Protocol):
    """A watch (or a cache) that remembers jobs between rounds names the maps and sets it keeps
    them in (keyed by a job id, or by a tuple that starts with one): the retention watch forgets
    there the jobs Slurm no longer lists (`retention.JobMemory`)."""

    def job_maps(self) -> list[Any]: ...
