"""What a daemon must be able to load before it starts: all of it, or it refuses to start.

A daemon that ran on with a part missing (a watcher without its memory forecasts because
statsmodels failed to import, say) would switch a run-time action off without a word. Each
daemon therefore imports, at start, every module it would otherwise load on first use, and
refuses to start with one clear line (on stderr, which systemd's journal shows) naming what
is missing and how to install it.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
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


_CHILD_CHECK = ("import sys\n"
                "from slurm_plugin.startup import MissingDependency, require\n"
                "try:\n"
                "    require(sys.argv[1], sys.argv[2:])\n"
                "except MissingDependency as exc:\n"
                "    print(exc, file=sys.stderr)\n"
                "    sys.exit(3)\n")


def require_in_child(daemon: str, modules: Iterable[str], timeout_s: float = 300.0) -> None:
    """`require`, in a Python process of its own: what another process will load (the watcher's
    statsmodels and scipy, about 70 MiB) is checked without being kept in this one (the submit
    side, which never uses it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", _CHILD_CHECK, daemon, *modules], capture_output=True, text=True,
                          env=env, timeout=timeout_s)
    if done.returncode == 0:
        return
    said = done.stderr.strip()
    if done.returncode == 3:
        raise MissingDependency(said)
    raise MissingDependency(f"{daemon} cannot start: checking what it loads failed (exit {done.returncode}): "
                            f"{said[-500:]}; {INSTALL_HINT}")


#: what the submit side never uses and a library would load anyway: sqlite-utils imports pandas
#: whenever it is installed (only to map `pandas.Timestamp` values to TEXT columns), and pandas is
#: installed for the watcher's statsmodels: about 33 MiB resident in the process that answers
#: slurmctld's shim
SUBMIT_SIDE_NEVER = ("pandas",)


def keep_out_of_submit_side() -> list[str]:
    """Mark :data:`SUBMIT_SIDE_NEVER` as not importable in this process (Python's own rule: a
    module whose `sys.modules` entry is None raises ImportError, which sqlite-utils takes as
    "not installed"), before the submit side imports anything; the modules marked (one already
    loaded is left as it is)."""
    marked = []
    for name in SUBMIT_SIDE_NEVER:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
            marked.append(name)
    return marked
