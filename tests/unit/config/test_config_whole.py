"""gpupack.toml checked as a whole: every key type- and range-checked with an error naming the
key, the value and what is allowed; unknown tables and keys reported; `gpupack config check`
offline; a bad edit of a running daemon's file keeps the settings in force and says why; the
reference page generated from the schema is up to date."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from packer.config import ConfigError
from slurm_plugin.cli import main
from slurm_plugin.config.reference import render
from slurm_plugin.config.reloading import ReloadingConfig, SettingsFile
from slurm_plugin.config.whole import SECTIONS, check_file, load_settings
from slurm_plugin.metrics.config_file import ConfigFileCollector

REPO = Path(__file__).resolve().parents[3]


def _write(path: Path, text: str, stamp: int | None = None) -> Path:
    path.write_text(text)
    if stamp is not None:
        os.utime(path, ns=(stamp, stamp))  # a new mtime even within the file system's resolution
    return path


@pytest.mark.parametrize("table, message", [
    ('[packer]\npack_unknown = "false"\n', '[packer] pack_unknown = "false" is not allowed: true or false'),
    ("[packer]\nheadroom_fraction = -0.1\n", "[packer] headroom_fraction = -0.1 is not allowed: a number, >= 0"),
    ("[packer]\nmin_headroom_gib = -1\n", "[packer] min_headroom_gib = -1 is not allowed: a number, >= 0"),
    ('[packer]\nshares_per_gpu = "8"\n', '[packer] shares_per_gpu = "8" is not allowed: a whole number, >= 1'),
    ("[packer]\nhistory_window = true\n", "[packer] history_window = true is not allowed: a whole number"),
    ("[monitor]\nskip_requeue_delay = 1\n", "[monitor] skip_requeue_delay = 1 is not allowed: true or false"),
    ('[monitor]\nmig_layout = "fifo"\n', '[monitor] mig_layout = "fifo" is not allowed: one of "in-order"'),
    ("[monitor]\nmps_floor_pct = 101\n", "[monitor] mps_floor_pct = 101 is not allowed: a whole number, >= 0 and <= 100"),
    ("[paths]\ndatabase = 5\n", "[paths] database = 5 is not allowed: a path"),
    ("[web]\nmax_rows = 0\n", "[web] max_rows = 0 is not allowed: a whole number, >= 1"),
    ("[metrics]\nwatch_port = -1\n", "[metrics] watch_port = -1 is not allowed"),
    ('[packer]\ngpu_type = "h 100"\n', '[packer] gpu_type = "h 100" is not allowed: a GRES type name'),
    ("[agent]\nport = 70000\n", "[agent] port = 70000 is not allowed: a whole number, > 0 and < 65536"),
    ("[agent]\nstale_after_s = 0\n", "[agent] stale_after_s = 0 is not allowed: a number, > 0"),
])
def test_each_bad_value_is_refused_naming_key_value_and_what_is_allowed(tmp_path, table, message):
    path = _write(tmp_path / "gpupack.toml", table)
    problems = check_file(path)
    assert len(problems) == 1 and message in problems[0], problems
    with pytest.raises(ConfigError, match="is not allowed"):
        load_settings(path)


def test_every_problem_of_the_file_is_listed_with_unknown_tables_and_keys(tmp_path):
    path = _write(tmp_path / "gpupack.toml", '[packer]\npack_unknown = "false"\nheadroom = 0.2\n'
                  '[monitor]\ninterval_s = 0\n[packr]\nmode = "enforce"\n')
    problems = check_file(path)
    assert len(problems) == 3, problems
    assert "unknown table [packr]" in problems[0] and "[packer]" in problems[0]
    assert "unknown [packer] keys ['headroom']" in problems[1]
    assert "[monitor] interval_s = 0 is not allowed: a number, > 0" in problems[2]


def test_an_agents_entry_that_is_not_host_port_is_refused(tmp_path):
    path = _write(tmp_path / "gpupack.toml", '[agents]\nnode1 = "127.0.0.1"\n')
    problems = check_file(path)
    assert len(problems) == 1 and '[agents] node1 must be "host:port"' in problems[0], problems
    with pytest.raises(ConfigError, match="host:port"):
        load_settings(path)


def test_the_dev_clusters_generated_file_passes_the_whole_check(tmp_path):
    """Every table the dev cluster writes ([packer] gpu_type, [agent], the [agents] map, ...)
    is declared: a daemon started on it does not refuse it."""
    from slurm_plugin.devcluster.spec import ClusterSpec, gpupack_toml

    spec = ClusterSpec(state_dir=tmp_path / "dc", port=20000)
    path = _write(tmp_path / "gpupack.toml", gpupack_toml(spec, 5, 79.6))
    assert check_file(path) == []
    settings = load_settings(path)
    assert settings.packer.gpu_type == spec.gres_type
    assert {n: str(a) for n, a in settings.agent.agents.items()} == {n: spec.agent_address(n) for n in spec.node_names}
    assert settings.agent.munge_socket == str(spec.munge_socket)


def test_a_whole_number_where_a_decimal_is_expected_is_that_decimal(tmp_path):
    settings = load_settings(_write(tmp_path / "g.toml", "[packer]\ngpu_memory_gib = 40\n[paths]\n"
                                    'database = "/x/db"\n'))
    assert settings.packer.gpu_memory_gib == 40.0 and isinstance(settings.packer.gpu_memory_gib, float)
    assert settings.paths.database == Path("/x/db")


def test_every_key_of_every_table_has_a_declared_type():
    from dataclasses import fields

    from packer.settings_schema import _hints

    for section, cls in SECTIONS.items():
        hints = _hints(cls)
        assert {f.name for f in fields(cls)} == set(hints), section


def test_config_check_command(tmp_path):
    runner = CliRunner()
    good = _write(tmp_path / "good.toml", '[packer]\nmode = "enforce"\n')
    done = runner.invoke(main, ["config", "check", str(good)])
    assert done.exit_code == 0 and done.output == f"{good}: ok\n"
    bad = _write(tmp_path / "bad.toml", '[packer]\npack_unknown = "false"\n')
    done = runner.invoke(main, ["config", "check", str(bad)])
    assert done.exit_code == 1
    assert f'Error: {bad}: [packer] pack_unknown = "false" is not allowed: true or false' in done.output
    done = runner.invoke(main, ["config", "check", str(REPO / "etc" / "gpupack.toml")])
    assert done.exit_code == 0, done.output


def test_a_bad_edit_of_a_running_daemons_file_keeps_the_settings_and_says_why(tmp_path, caplog):
    path = _write(tmp_path / "gpupack.toml", '[packer]\nmode = "enforce"\npack_unknown = true\n', 1_000_000_000)
    config = ReloadingConfig(path)
    heard: list[str] = []
    config.file.on_refused(heard.append)
    metrics = ConfigFileCollector(config.file)
    assert config().pack_unknown is True
    _write(path, '[packer]\nmode = "enforce"\npack_unknown = "false"\n', 2_000_000_000)
    with caplog.at_level(logging.ERROR):
        assert config().pack_unknown is True and config().mode == "enforce"  # the old settings stay
    assert 'pack_unknown = "false" is not allowed' in caplog.text and "keeping the settings in force" in caplog.text
    assert len(heard) == 1 and "pack_unknown" in heard[0]
    values = {m.name: m.samples[0].value for m in metrics.collect()}
    assert values == {"gpupack_config_refused": 1, "gpupack_config_refusals": 1}
    _write(path, '[packer]\nmode = "observe"\npack_unknown = false\n', 3_000_000_000)
    assert config().pack_unknown is False and config().mode == "observe"
    assert {m.name: m.samples[0].value for m in metrics.collect()}["gpupack_config_refused"] == 0


def test_a_daemon_refuses_to_start_on_a_bad_file(tmp_path):
    path = _write(tmp_path / "gpupack.toml", "[packer]\nheadroom_fraction = -0.5\n")
    with pytest.raises(ConfigError, match="headroom_fraction = -0.5"):
        SettingsFile(path)


def test_the_reference_page_is_up_to_date():
    """docs/config.md is `gpupack config reference`: regenerate it after changing a setting."""
    assert (REPO / "docs" / "config.md").read_text() == render()


def test_the_reference_names_every_key_with_its_range():
    page = render()
    for section, cls in SECTIONS.items():
        assert f"## [{section}]" in page
    assert "| `headroom_fraction` | `0.1` | a number, >= 0 and <= 1 |" in page
    assert "| `mode` | `\"observe\"` | one of \"observe\", \"advise\", \"enforce\" |" in page
