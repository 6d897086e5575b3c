"""gpupack.toml as a running daemon holds it: re-read as a whole when it changes.

A good edit takes effect at once for what the daemons re-read each time they use it (`[packer]`
on every submission and every watcher round, `[monitor.actions]` every round); the rest is
read at start. A bad edit keeps every setting in force: it is logged with every problem, each
listener hears it (the watcher writes a `config-refused` event), and `gpupack_config_refused`
is 1 until the file loads again.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from packer.config import PackerConfig
from packer.settings_schema import ConfigError
from slurm_plugin.config.whole import GpupackSettings, load_settings

log = logging.getLogger(__name__)


class SettingsFile:
    """The settings in force, re-read when the file's modification time changes."""

    def __init__(self, path: Path):
        self.path = path
        self._path_text = os.fspath(path)
        self._mtime = self._stat()
        self.settings = load_settings(path)  # at start a bad file is an error: the daemon refuses
        self.refused: str | None = None  # why the file on disk is not in force, while it is not
        self.refusals = 0
        self._listeners: list[Callable[[str], None]] = []

    def on_refused(self, listener: Callable[[str], None]) -> None:
        """Call `listener(why)` each time an edit is refused."""
        self._listeners.append(listener)

    def _stat(self) -> int | None:
        try:
            return os.stat(self._path_text).st_mtime_ns  # on every submission: no pathlib
        except OSError:
            return None

    def __call__(self) -> GpupackSettings:
        mtime = self._stat()
        if mtime != self._mtime:
            self._mtime = mtime
            self._reload()
        return self.settings

    def _reload(self) -> None:
        try:
            settings = load_settings(self.path)
        except ConfigError as exc:
            self.refused = str(exc)
            self.refusals += 1
            log.error("%s: edit refused, keeping the settings in force (mode=%s): %s", self.path,
                      self.settings.packer.mode, exc)
            for listener in self._listeners:
                listener(str(exc))
            return
        self.refused = None
        if settings == self.settings:
            return
        old, self.settings = self.settings, settings
        restart = [name for name in ("paths", "metrics", "web", "limits", "retention")
                   if getattr(old, name) != getattr(settings, name)]
        if _without_actions(old) != _without_actions(settings):
            restart.append("monitor")
        log.info("reloaded %s: mode=%s%s", self.path, settings.packer.mode,
                 f"; changes to {', '.join(f'[{n}]' for n in restart)} take effect when the daemon restarts"
                 if restart else "")


def _without_actions(settings: GpupackSettings) -> dict:
    from dataclasses import asdict

    table = asdict(settings.monitor)
    table.pop("actions")
    return table


class ReloadingConfig:
    """`[packer]` of a `SettingsFile` (the submit side calls it for every submission)."""

    def __init__(self, path: Path | SettingsFile):
        self.file = path if isinstance(path, SettingsFile) else SettingsFile(path)
        self.path = self.file.path

    def __call__(self) -> PackerConfig:
        return self.file().packer
