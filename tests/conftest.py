"""Session-wide: name the Slurm release the tests run on in pytest's header."""
from __future__ import annotations

import sys

from hypothesis import HealthCheck, settings

# Property tests assert what the code does, not how fast this machine draws examples: on a
# loaded 2-CPU CI runner one draw can take seconds (seen: 2.4 s for a dictionary of binaries),
# which would fail a test that has nothing wrong. Their number of examples stays the default.
settings.register_profile("gpupack", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gpupack")


def pytest_report_header(config) -> list[str]:
    from slurm_plugin.devcluster.roots import describe

    return [f"gpupack: {describe()}, python {sys.version.split()[0]}"]
