"""Victims of grow by preemption go back to the head of the queue once their grower runs.

`GrowWatch` (`watches/grow.py`) requeues each victim and leaves it held, so that it cannot
take back the shares before the grower restarts on them; this watch releases it at the head
of the queue (`grow-release`) when the grower runs again (a run that started after the
eviction, not its old run still ending), is gone, or did not start within
`[monitor] grow_hold_victims_s`. It runs whatever the `grow-preempt` mode is now, so that no
victim stays held after the action is switched off.
"""
from __future__ import annotations

from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE

RELEASE_KIND = "grow-release"


class GrowReleaseWatch:
    name = "grow-release"

    def round(self, ctx: RoundContext) -> None:
        """Held victims go back to the head of the queue once their grower runs again."""
        held = ctx.actions.state.held_for_grower
        for victim, (grower, since) in list(held.items()):
            job = ctx.jobs.get(victim)
            if job is None or job.state == "RUNNING":  # gone, or someone else released it
                held.pop(victim)
                continue
            if job.state != "PENDING":  # its old run is still being requeued (COMPLETING, REQUEUE_HOLD)
                if job.is_finished and ctx.now - since > ctx.settings.grow_hold_victims_s:
                    held.pop(victim)  # ended for good (cancelled by its owner)
                continue
            g = ctx.jobs.get(grower)
            # its new run: the old one can still show RUNNING or COMPLETING while Slurm requeues
            # it (26.05 finishes a requeue seconds later), and a victim released then may start
            # before the grower, on the shares it was evicted from
            again = g is not None and g.state in ACTIVE and g.start_time is not None \
                and g.start_time.timestamp() >= int(since)
            waiting = g is not None and not again and not g.is_finished
            if waiting and ctx.now - since < ctx.settings.grow_hold_victims_s:
                continue
            why = (f"job {grower} runs again on its larger share" if again else
                   f"job {grower} did not start within {ctx.settings.grow_hold_victims_s:.0f}s"
                   if waiting else f"job {grower} is gone")
            if ctx.actions.release_to_head(victim, RELEASE_KIND, f"released at the head of the queue: {why}",
                                           grower=grower):
                held.pop(victim)
