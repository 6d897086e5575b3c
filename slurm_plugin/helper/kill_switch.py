"""The kill switch, as the watcher obeys it: while the file exists, nothing is done to jobs.

The submit shim and the submit side already pass every job through while `[paths]
kill_switch` exists. The watcher checks the same file at the start of each round; while it is
there the round only observes (samples, outcomes, history, metrics) and runs the two steps
that keep jobs safe rather than packing them:

- the gpu+shard collision guard (`quirk-guard`): a packed job must never share a GPU that
  Slurm also gave whole to another job, unisolated;
- the release of jobs a grower left held (`grow-release`): they go back to the queue, never
  stay held because the switch was turned on;
- the MPS plan (`mps`): the share limits of packed jobs that already run on MPS nodes;
- out-of-memory ends (`oom`): each end a node agent holds is let go at once, not requeued.

No requeue, restart, grow, regroup, steering, priority change or MIG layout change happens.
Turning the switch on or off is logged and written to the event log (`kill-switch`), and the
`gpupack_actions_halted` gauge is 1 while it is on.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

KIND = "kill-switch"

#: the watches (by `name`) that still run while the switch is on
RUN_WHILE_HALTED = frozenset({"tracks", "outcomes", "history", "quirk-guard", "grow-release", "mps", "retention",
                              "metrics", "oom"})
#: the actions `Actions` still carries out while the switch is on (see above)
ACTIONS_WHILE_HALTED = frozenset({"requeue-quirk", "grow-release"})


class KillSwitch:
    """Whether the kill switch file exists, checked once a round; changes are logged."""

    def __init__(self, path: Path | None):
        self.path = path
        self._text = os.fspath(path) if path is not None else None
        self.on = False

    def check(self, log_event) -> bool:
        """True while the file exists. `log_event(kind, detail)` records each change."""
        on = self._text is not None and os.path.exists(self._text)
        if on != self.on:
            self.on = on
            if on:
                detail = (f"{self.path} exists: the watcher does nothing to jobs (no requeue, restart, grow, "
                          "regroup, steering or priority change) until it is removed")
                log.warning("kill switch on: %s", detail)
            else:
                detail = f"{self.path} removed: the watcher acts again"
                log.warning("kill switch off: %s", detail)
            log_event(KIND, ("on: " if on else "off: ") + detail)
        return on
