"""Which settings `gpupack simulate` decides by: the shipped etc/gpupack.toml unless told a site's
file (--config) or the replay's legacy preset (--settings replay-legacy)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from mig.catalog import load_catalog
from packer.config import PackerConfig
from simulator.settings import for_model, legacy_packer, LegacyReplay
from simulator.workload import default_data_dir
from slurm_plugin.cli.simulate_cmd import SHIPPED_TOML, simulate

needs_data = pytest.mark.skipif(default_data_dir() is None,
                                reason="shared/data/traces not found (set GPUPACK_DATA_DIR)")
SMALL = ["--policy", "colocate", "--predictor", "on", "--gpu-model", "H100-80GB", "--gpus", "8",
         "--jobs", "200", "--json"]


def _run(args: list[str]) -> dict:
    res = CliRunner().invoke(simulate, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_the_shipped_file_is_the_one_the_command_reads():
    assert SHIPPED_TOML == Path(__file__).resolve().parents[3] / "etc" / "gpupack.toml"
    assert SHIPPED_TOML.is_file()


def test_the_shipped_packer_table_goes_to_the_replayed_model():
    a100 = for_model(PackerConfig(), load_catalog("A100-80GB"), "A100-80GB")
    assert (a100.gpu_model, a100.shares_per_gpu, a100.pack_unknown) == ("A100-80GB", 5, False)
    assert a100.rungs == (1, 2, 4, 5)


def test_a_model_without_a_ladder_for_the_shares_gets_any_count(caplog):
    with caplog.at_level(logging.WARNING):
        a30 = for_model(PackerConfig(), load_catalog("A30-24GB"), "A30-24GB")
    assert a30.gpu_model == "" and a30.gpu_memory_gib == pytest.approx(24.0, abs=0.5)
    assert "no share ladder" in caplog.text


def test_the_legacy_preset_is_the_replays_old_block():
    cat = load_catalog("H100-80GB")
    pk = legacy_packer(cat, LegacyReplay(pair_predict=True, load_aware=True))
    assert (pk.gpu_model, pk.shares_per_gpu, pk.max_util_pct, pk.pack_unknown) == ("", cat.memory_slices, 100.0, True)
    assert legacy_packer(cat, None).pack_unknown is False  # other policies: the defaults
    assert legacy_packer(cat, LegacyReplay(pair_predict=False, load_aware=True)).max_util_pct == 90.0


@needs_data
def test_simulate_decides_by_the_shipped_settings_unless_told_otherwise(tmp_path):
    shipped = _run(SMALL)
    assert shipped["settings"] == "shipped etc/gpupack.toml, recurrence 0.6"
    assert "packs_by_exact" in shipped
    legacy = _run(SMALL + ["--settings", "replay-legacy"])
    assert legacy["settings"] == "replay-legacy" and "packs_by_exact" not in legacy
    site = tmp_path / "site.toml"
    site.write_text("[packer]\npack_unknown = true\n")
    mine = _run(SMALL + ["--config", str(site), "--recurrence", "0.3"])
    assert mine["settings"] == f"{site}, recurrence 0.3" and mine["recurrence_rate"] == 0.3


@needs_data
def test_the_legacy_preset_takes_no_site_file(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[packer]\n")
    res = CliRunner().invoke(simulate, SMALL + ["--settings", "replay-legacy", "--config", str(site)])
    assert res.exit_code != 0 and "replay-legacy" in res.output
