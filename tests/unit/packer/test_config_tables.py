"""`packer.config.read_table`: one table of gpupack.toml, its keys checked against a dataclass
(what load_config, load_paths and the [monitor], [metrics] and [web] loaders read through)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from packer.config import ConfigError
from slurm_plugin.config.toml_file import read_table


@dataclass(frozen=True)
class Settings:
    port: int = 0
    address: str = "127.0.0.1"


def test_a_missing_file_or_table_reads_as_empty(tmp_path):
    assert read_table(None, "web", Settings) == {}
    assert read_table(tmp_path / "absent.toml", "web", Settings) == {}
    path = tmp_path / "gpupack.toml"
    path.write_text("[packer]\nmode = \"enforce\"\n")
    assert read_table(path, "web", Settings) == {}


def test_the_table_is_read_and_an_unknown_key_is_named_with_the_known_ones(tmp_path):
    path = tmp_path / "gpupack.toml"
    path.write_text("[web]\nport = 8080\n")
    assert read_table(path, "web", Settings) == {"port": 8080}
    path.write_text("[web]\nport = 8080\nprot = 1\n")
    with pytest.raises(ConfigError, match=r"unknown \[web\] keys \['prot'\]; known keys: \['address', 'port'\]"):
        read_table(path, "web", Settings)


def test_a_moved_key_says_where_it_went_and_a_broken_file_is_an_error(tmp_path):
    path = tmp_path / "gpupack.toml"
    path.write_text("[web]\nold_port = 1\n")
    with pytest.raises(ConfigError, match=r"\[web\] old_port moved to \[metrics\]"):
        read_table(path, "web", Settings, moved={"old_port": "moved to [metrics]"})
    path.write_text("[web\n")
    with pytest.raises(ConfigError, match="cannot read"):
        read_table(path, "web", Settings)
