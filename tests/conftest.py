"""Session-wide: name the Slurm release the tests run on in pytest's header."""
from __future__ import annotations

import getpass
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests assert what the code does, not how fast this machine draws examples: on a
# loaded 2-CPU CI runner one draw can take seconds (seen: 2.4 s for a dictionary of binaries),
# which would fail a test that has nothing wrong. Their number of examples stays the default.
settings.register_profile("gpupack", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gpupack")


#: A test run's own temporary root, ``RUN_PREFIX<pid>``: pytest's default ``pytest-N`` folders are
#: shared by every run on the machine, and a run removes the oldest but three at its start, so a
#: second `make test` beside a running one deleted folders the first one's tests were standing in
#: (seen: getcwd() failing, a sitecustomize that could not start).
RUN_PREFIX = "gpupack-run-"
KEEP_ENDED_RUNS = 3  # ended runs' folders kept for a look after a failure, the newest first


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def own_basetemp(root: Path, pid: int) -> Path:
    """``root/RUN_PREFIX<pid>``, after removing the folders of ended runs but the newest few
    (a run whose process still lives keeps its folder)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    ended = []
    for entry in root.glob(RUN_PREFIX + "*"):
        owner = entry.name[len(RUN_PREFIX):]
        if owner.isdigit() and int(owner) != pid and not _alive(int(owner)):
            ended.append(entry)
    ended.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    for entry in ended[KEEP_ENDED_RUNS:]:
        shutil.rmtree(entry, ignore_errors=True)
    return root / f"{RUN_PREFIX}{pid}"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    """Each run its own temporary root, unless ``--basetemp`` names one (xdist's workers get
    folders under the controller's)."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        root = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
        config.option.basetemp = str(own_basetemp(root, os.getpid()))


def pytest_report_header(config) -> list[str]:
    from slurm_plugin.devcluster.roots import describe

    return [f"gpupack: {describe()}, python {sys.version.split()[0]}"]


#: Unit tests that depend on the Slurm release or the Debian suite they run on: they read the
#: release's recorded output, run its Lua and luasocket (the shim), build against its headers (the
#: SPANK plugin), or start its munge, MariaDB or cgroup set-up. Marked `release`: CI runs them in
#: every release's leg, and the rest of the unit tests once (`make test UNIT=release`).
RELEASE_DEPENDENT = (
    "unit/slurm/",
    "unit/helper/test_shim_bounds_lua.py", "unit/helper/test_submit_fuzz_lua.py", "unit/helper/test_request_forms_lua.py",
    "unit/agent/test_spank_device_cgroup.py", "unit/agent/test_agent_link.py",
    "unit/devcluster/test_devcluster_accounting.py", "unit/devcluster/test_devcluster_dirs.py",
    "unit/devcluster/test_devcluster_cgroup_v2.py", "unit/devcluster/test_roots.py",
)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        try:
            rel = Path(item.fspath).relative_to(TESTS).as_posix()
        except ValueError:
            continue
        if rel.startswith(RELEASE_DEPENDENT):
            item.add_marker(pytest.mark.release)
