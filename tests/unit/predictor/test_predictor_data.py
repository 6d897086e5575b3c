import json
from pathlib import Path

import pytest

import predictor
from predictor.bench import run_bench
from predictor.kvmodel import LLAMA3_8B, QWEN2_7B
from predictor.series import read_series

DATA = Path(predictor.__file__).parent / "data"


def test_model_configs_match_their_public_config_json():
    # values from the config.json files cited in predictor/data/PROVENANCE.md
    assert (QWEN2_7B.num_hidden_layers, QWEN2_7B.num_key_value_heads, QWEN2_7B.head_dim) == (28, 4, 128)
    assert (LLAMA3_8B.num_hidden_layers, LLAMA3_8B.num_key_value_heads, LLAMA3_8B.head_dim) == (32, 8, 128)
    assert QWEN2_7B.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57344
    assert LLAMA3_8B.kv_bytes_per_token() == 131072
    # parameter counts as published: Qwen2-7B 7.6 B, Llama-3-8B 8.03 B
    assert QWEN2_7B.parameter_count() == pytest.approx(7.62e9, rel=0.01)
    assert LLAMA3_8B.parameter_count() == pytest.approx(8.03e9, rel=0.01)


def test_data_folder_is_small_documented_and_readable():
    files = list(DATA.iterdir())
    assert sum(f.stat().st_size for f in files if f.is_file()) < 1_000_000
    assert (DATA / "PROVENANCE.md").exists()
    csvs = sorted(DATA.glob("*.csv"))
    assert len(csvs) >= 8
    for path in csvs:
        series = read_series(path)
        assert len(series) >= 50
        meta = json.loads(path.with_suffix(".json").read_text())
        assert "capacity_gib" in meta or "capacity_bytes" in meta
        assert meta.get("description")
    assert any(json.loads(p.with_suffix(".json").read_text()).get("real") for p in csvs), "a real recorded series"


def test_bench_over_shipped_data_has_no_false_alarm_and_no_miss():
    report = run_bench(DATA)
    summary = report.summary()
    assert summary["false_alarms"] == 0
    assert summary["missed"] == 0
    assert summary["crossing"] >= 3 and summary["never_crossing"] >= 3
    # the goal on the peak forecast made at 10 % of the steps (the MIG thesis: 14.98 %)
    assert summary["mean_peak_error_at_10pct"] <= 0.15
    assert summary["goals"]["no_false_alarm"] and summary["goals"]["mean_peak_error_at_10pct_le_15pct"]
    # warnings: the modelled decode series within 0.2 N (0.1 N needs trusting a trend more
    # than 10 times its span, see predictor/forecast.py); the real one by 0.1 N
    for r in report.series:
        if r.crossing_step is not None:
            assert r.warn_fraction is not None and r.warn_fraction <= 0.2, r.name
    real = next(r for r in report.series if r.name.startswith("real_tinylm_cpu_generate"))
    assert real.warned_by_10pct

