import json

import click
import pytest
from click.testing import CliRunner

from slurm_plugin.cli.predict_cmd import predict

GIB = 1 << 30


def write_linear(path, n=300, base=4 * GIB, slope=0.02 * GIB):
    lines = ["step,bytes"] + [f"{i},{int(base + slope * i)}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")


def test_predict_json_shape(tmp_path):
    f = tmp_path / "job.csv"
    write_linear(f)  # crosses 8 GiB at step 200
    r = CliRunner().invoke(predict, ["--series", str(f), "--capacity-gib", "8", "--horizon", "299", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"warn_step", "predicted_peak_bytes", "upper_bytes", "next_partition"} <= set(d)
    assert isinstance(d["warn_step"], int) and d["warn_step"] < 200
    assert d["next_partition"] == 10 * GIB  # 9.98 GiB at the horizon fits 1g.10gb
    assert d["predicted_peak_bytes"] == pytest.approx(4 * GIB + 0.02 * GIB * 299, rel=0.01)


def test_predict_no_warning_is_null_and_text_output(tmp_path):
    f = tmp_path / "flat.csv"
    write_linear(f, slope=0)
    r = CliRunner().invoke(predict, ["--series", str(f), "--capacity-gib", "8", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["warn_step"] is None
    r = CliRunner().invoke(predict, ["--series", str(f), "--capacity-gib", "8"])
    assert r.exit_code == 0 and "warning at step: -" in r.output and "next partition:  10.00 GiB" in r.output


def test_predict_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,bytes\n0,1\n1,x\n")
    r = CliRunner().invoke(predict, ["--series", str(bad), "--capacity-gib", "8"])
    assert r.exit_code == 1
    assert r.output == f"Error: {bad}:3: bytes 'x' is not a number\n"
    r = CliRunner().invoke(predict, ["--series", str(tmp_path / "nope.csv"), "--capacity-gib", "8"])
    assert r.exit_code == 1 and "no such file" in r.output
    r = CliRunner().invoke(predict, ["--capacity-gib", "8"])
    assert r.exit_code == 2 and "--series" in r.output


def test_bench_json_on_a_directory(tmp_path):
    write_linear(tmp_path / "grow.csv")
    (tmp_path / "grow.json").write_text(json.dumps({"capacity_gib": 8, "horizon": 299}))
    write_linear(tmp_path / "flat.csv", slope=0)
    (tmp_path / "flat.json").write_text(json.dumps({"capacity_bytes": 8 * GIB}))
    (tmp_path / "nocap.csv").write_text("step,bytes\n0,1\n")
    r = CliRunner().invoke(predict, ["bench", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    by_name = {s["name"]: s for s in d["series"]}
    assert by_name["grow.csv"]["crossing_step"] == 201 and by_name["grow.csv"]["lead_steps"] > 0
    grow = by_name["grow.csv"]
    assert grow["warn_fraction"] == pytest.approx(grow["warn_step"] / 201)
    assert by_name["flat.csv"]["warn_fraction"] is None
    assert by_name["flat.csv"]["false_alarm"] is False
    assert d["summary"]["false_alarms"] == 0 and d["summary"]["crossing"] == 1
    assert any("nocap.csv" in s for s in d["skipped"])
    r = CliRunner().invoke(predict, ["bench", str(tmp_path)])
    assert r.exit_code == 0 and "false alarms: 0/1" in r.output


def test_bench_errors(tmp_path):
    r = CliRunner().invoke(predict, ["bench", str(tmp_path / "missing")])
    assert r.exit_code == 1 and "not a directory" in r.output
    r = CliRunner().invoke(predict, ["bench", str(tmp_path)])
    assert r.exit_code == 1 and "no *.csv" in r.output


def _commands(cmd, prefix=()):
    yield prefix, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, prefix + (name,))


def test_every_command_has_help_and_short_flag():
    for path, cmd in _commands(predict):
        assert cmd.help, path
        r = CliRunner().invoke(predict, [*path, "-h"])
        assert r.exit_code == 0 and "Usage" in r.output, path


def test_registered_in_the_root_cli():
    from slurm_plugin.cli import main

    r = CliRunner().invoke(main, ["predict", "--help"])
    assert r.exit_code == 0 and "bench" in r.output
