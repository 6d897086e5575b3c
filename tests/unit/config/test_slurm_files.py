"""`gpupack config check` checks the Slurm files the suite's safety rests on (issue 33): the SPANK
plugin loaded 'required' (with 'optional' a .so that fails to load runs every step unisolated), and
no RequeueExit of 117 (a job can exit 117 by itself)."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from slurm_plugin.cli.config_cmd import config
from slurm_plugin.config.slurm_files import check_plugstack_file, plugstack_problems, slurm_conf_problems

ROOT = Path(__file__).resolve().parents[3]
LINE = "/usr/lib/slurm/gpupack_spank-22.05.so socket=/run/agent-%n.sock"


def test_the_shipped_files_pass():
    assert check_plugstack_file(ROOT / "etc" / "plugstack.conf") == []
    assert slurm_conf_problems((ROOT / "etc" / "slurm.conf.snippet").read_text(), "snippet") == []


def test_an_optional_plugin_line_is_a_problem():
    (problem,) = plugstack_problems(f"# comment\noptional {LINE}\n", "p.conf")
    assert problem.startswith("p.conf:2:") and "'required'" in problem and "unisolated" in problem
    assert plugstack_problems(f"required {LINE}\n", "p.conf") == []


def test_a_missing_plugin_line_is_a_problem():
    (problem,) = plugstack_problems("required /usr/lib/slurm/other.so\n", "p.conf")
    assert "no line loads the gpupack SPANK plugin" in problem


def test_includes_are_followed(tmp_path):
    (tmp_path / "plugstack.conf.d").mkdir()
    (tmp_path / "plugstack.conf.d" / "gpupack.conf").write_text(f"optional {LINE}\n")
    (tmp_path / "plugstack.conf").write_text("include plugstack.conf.d/*.conf\n")
    (problem,) = check_plugstack_file(tmp_path / "plugstack.conf")
    assert "gpupack.conf:1:" in problem


def test_requeue_exit_of_117_is_a_problem():
    assert slurm_conf_problems("RequeueExit=117\n", "s")[0].startswith("s:1: RequeueExit=117")
    assert slurm_conf_problems("RequeueExitHold=100-120\n", "s")
    assert slurm_conf_problems("RequeueExit=1,2\n# RequeueExit=117\n", "s") == []


def test_config_check_names_the_problem(tmp_path):
    toml = tmp_path / "gpupack.toml"
    toml.write_text("")
    plug = tmp_path / "plugstack.conf"
    plug.write_text(f"optional {LINE}\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("RequeueExit=117\n")
    out = CliRunner().invoke(config, ["check", str(toml), "--plugstack", str(plug), "--slurm-conf", str(conf)])
    assert out.exit_code == 1 and "'required'" in out.output and "RequeueExit=117" in out.output
    plug.write_text(f"required {LINE}\n")
    conf.write_text("RequeueExit=1\n")
    out = CliRunner().invoke(config, ["check", str(toml), "--plugstack", str(plug), "--slurm-conf", str(conf)])
    assert out.exit_code == 0, out.output
