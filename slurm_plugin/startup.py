"""What a daemon must be able to load before it starts: all of it, or it refuses to start.

A daemon that ran on with a part missing (a watcher without its memory forecasts because
statsmodels failed to import, say) would switch a run-time action off without a word. Each
daemon therefore imports, at start, every module it would otherwise load on first use, and
refuses to start with one clear line (on stderr, which systemd's journal shows) naming what
is missing and how to install it.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable

#: what the helper's watcher loads: the monitor and its watches, the memory forecasts (and
#: what they load on first use: statsmodels' OLS for a warning's confirmation, scipy's t
#: quantiles), the MIG catalogues, the node agents' client and the metrics
WATCHER_MODULES = (
    "slurm_plugin.helper.monitor",
    "predictor.forecast",
    "statsmodels.regression.linear_model",
    "scipy.special",
    "mig.catalog",
    "slurm_plugin.agent.client",
    "slurm_plugin.metrics.watcher",
    "slurm_plugin.helper.slurm_poll",
)

INSTALL_HINT = ("install the suite's dependencies (scripts/install-deps.sh, or `pip install .` in the "
                "project's folder) for the Python that runs the daemon")


class MissingDependency(RuntimeError):
    """A module a daemon needs cannot be imported; the message names it and the fix."""


def require(daemon: str, modules: Iterable[str]) -> None:
    """Import each of `modules`; a `MissingDependency` naming the first that fails."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = exc.name or str(exc)
            raise MissingDependency(
                f"{daemon} cannot start: {missing!r} cannot be imported (needed by {module}: {exc}); "
                f"{INSTALL_HINT}") from exc
