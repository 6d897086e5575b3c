"""Reading gpupack.toml's tables: the one place the file is parsed and a table's keys are
checked against its settings class (the schema: `packer.settings_schema`)."""
from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packer.config import PackerConfig
from packer.settings_schema import ConfigError, schema_fields


def read_document(path: str | Path | None) -> dict[str, Any]:
    """The whole file as TOML (empty without a file); `ConfigError` when it cannot be read."""
    if path is None or not Path(path).exists():
        return {}
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def table_of(document: Mapping[str, Any], path: str | Path | None, section: str, settings: type,
             moved: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`[section]` of a parsed document, its keys checked against the fields of `settings`:
    a ConfigError for a table that is not one or an unknown key (naming the known ones; a key
    of `moved`: where it went instead)."""
    table = document.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {section} = {table!r} is not allowed: [{section}] must be a table")
    known = {f.name for f in schema_fields(settings)}
    unknown = sorted(set(table) - known)
    for key in unknown:
        if moved and key in moved:
            raise ConfigError(f"{path}: [{section}] {key} {moved[key]}")
    if unknown:
        raise ConfigError(f"{path}: unknown [{section}] keys {unknown}; known keys: {sorted(known)}")
    return dict(table)


def read_table(path: str | Path | None, section: str, settings: type,
               moved: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `[section]` table of the TOML file at `path` (empty without the file or the table),
    checked as `table_of` does."""
    return table_of(read_document(path), path, section, settings, moved)


def load_config(path: str | Path | None, section: str = "packer") -> PackerConfig:
    """Read the `[packer]` table of a TOML file; a missing file gives the defaults."""
    return PackerConfig(**read_table(path, section, PackerConfig))
