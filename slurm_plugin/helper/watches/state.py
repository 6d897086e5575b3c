"""What the watches keep between the monitor's rounds (`round.RoundContext.state`)."""
from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

from slurm_plugin.helper.watches.head_lift import Lift
from slurm_plugin.helper.watches.tracks import Track


@dataclass
class WatchState:
    """What the watches remember between rounds (lost when the helper restarts, but for the
    lifts: the monitor keeps them in the store, `store.lifts.HeadLifts`)."""

    tracks: dict[int, Track] = field(default_factory=dict)  # running jobs with samples
    # requeued job -> its head-of-queue lift
    heading: MutableMapping[int, Lift] = field(default_factory=dict)
    ours_excluded: dict[int, frozenset[str]] = field(default_factory=dict)  # what we added to ExcNodeList
    quirk_excluded: dict[int, tuple[str, frozenset[int]]] = field(default_factory=dict)  # job -> (node, keepers)
    reported: set[tuple[int, float]] = field(default_factory=set)  # (job, run start) already judged
    # grow evictions left held until their grower starts: victim -> (grower, when requeued)
    held_for_grower: dict[int, tuple[int, float]] = field(default_factory=dict)
    # nodes a pending job is kept off until it starts (a regrouped job: the node freed for the
    # head); steering keeps them in its ExcNodeList instead of lifting them
    kept_off: dict[int, frozenset[str]] = field(default_factory=dict)
    # (senior, its run start, newcomer, its run start) whose pair speed is recorded: once per pack
    pairs_measured: set[tuple[int, float, int, float]] = field(default_factory=set)
    # tracks of runs an action requeued (track, the action's kind): the history watch stores
    # their memory curves on its next turn
    requeued_tracks: list[tuple[Track, str]] = field(default_factory=list)

    def job_maps(self) -> list:
        """The maps and sets keyed by a job that the watch that fills them does not empty itself
        (the tracks go with their runs, the requeued tracks on the history watch's turn)."""
        return [self.heading, self.ours_excluded, self.quirk_excluded, self.reported, self.held_for_grower,
                self.kept_off, self.pairs_measured]
