"""Whether gpupack.toml on disk is the one in force (`slurm_plugin.config.reloading`)."""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ConfigFileCollector(Collector):
    """gpupack_config_refused (1 while an edit is refused) and gpupack_config_refusals_total."""

    def __init__(self, settings_file):
        self._file = settings_file  # a SettingsFile: .refused, .refusals

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("gpupack_config_refused", "1 while the edited gpupack.toml is refused (the "
                                "settings in force are kept; the daemon's log says why).",
                                value=int(self._file.refused is not None))
        yield CounterMetricFamily("gpupack_config_refusals", "Edits of gpupack.toml refused since the "
                                  "daemon started.", value=self._file.refusals)
