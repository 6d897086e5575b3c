"""What the watcher's rounds cost and whether slurmctld keeps up: the figures the metrics and
the cluster view publish (`gpupack_watcher_*`, the view's ``watcher`` entry), and one log line
when rounds start being stretched (slurmctld slow, a long queue) and one when they are back to
the interval: per episode, never per round."""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class RoundLoad:
    """Updated by the monitor each round; read by `MonitorCollector` and the view's publisher."""

    interval_s: float
    round_s: float | None = None  # the last round's own time
    cycle_s: float | None = None  # the last round plus its pause
    slurm_s: float | None = None  # the last round's time in Slurm commands (queue, nodes, actions)
    queue_s: float | None = None  # the last queue read's time in Slurm commands
    queue_kind: str | None = None  # "json", "formatted", "changes", "unchanged"
    queue_commands: int = 0
    stretched: bool = False  # the rounds now come slower than the interval
    episodes: int = 0  # stretched episodes since the start
    stretched_rounds: int = 0  # rounds in the current episode
    reads: Counter = field(default_factory=Counter)  # queue reads by kind
    skipped_records: int = 0  # queue records refused (hostile or unreadable), all told
    detail_jobs: int = 0  # jobs whose JSON detail was read, all told
    last_skipped: int = 0  # records the last full read refused (said when it changes)

    def queue_read(self, read) -> None:
        self.queue_s, self.queue_kind, self.queue_commands = read.query_s, read.kind, read.commands
        self.reads[read.kind] += 1
        self.skipped_records += read.skipped
        self.detail_jobs += read.detail_jobs
        if read.kind != "unchanged" and read.skipped != self.last_skipped:
            log.warning("%d queue records refused (unreadable or hostile text; left out, counted in "
                        "gpupack_watcher_queue_records_skipped_total)%s", read.skipped,
                        "" if read.skipped else ": none now")
            self.last_skipped = read.skipped

    def round_ended(self, round_s: float, cycle_s: float, why: str = "") -> None:
        """A round took ``round_s`` and the next starts ``cycle_s`` after it began."""
        self.round_s, self.cycle_s = round_s, cycle_s
        stretched = cycle_s > self.interval_s * 1.5 and cycle_s - self.interval_s > 0.5
        if stretched and not self.stretched:
            self.episodes += 1
            self.stretched_rounds = 0
            log.warning("watcher rounds stretched: a round took %.1f s (%s; Slurm %.1f s of it), one round "
                        "every %.1f s instead of %.1f s until slurmctld answers faster", round_s,
                        why or "where: unknown", self.slurm_s or 0.0, cycle_s, self.interval_s)
        elif self.stretched and not stretched:
            log.warning("watcher rounds back to every %.1f s after %d stretched rounds", self.interval_s,
                        self.stretched_rounds)
        self.stretched = stretched
        if stretched:
            self.stretched_rounds += 1

    def to_doc(self) -> dict:
        """For the cluster view file (what `gpupack bench scale` and a person read)."""
        return {"round_s": self.round_s, "cycle_s": self.cycle_s, "slurm_s": self.slurm_s,
                "queue_s": self.queue_s, "queue_kind": self.queue_kind, "queue_commands": self.queue_commands,
                "stretched": self.stretched, "stretched_episodes": self.episodes,
                "queue_reads": dict(self.reads), "queue_records_skipped": self.skipped_records}
