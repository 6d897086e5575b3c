"""Session-wide: name the Slurm release the tests run on in pytest's header."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests assert what the code does, not how fast this machine draws examples: on a
# loaded 2-CPU CI runner one draw can take seconds (seen: 2.4 s for a dictionary of binaries),
# which would fail a test that has nothing wrong. Their number of examples stays the default.
settings.register_profile("gpupack", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gpupack")


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
