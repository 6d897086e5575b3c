"""The dev cluster's web view: its port follows the cluster's, and its config says so."""
from __future__ import annotations

from pathlib import Path

from slurm_plugin.devcluster import spec as specmod
from slurm_plugin.devcluster.spec import ClusterSpec
from slurm_plugin.web.settings import load_web_settings


def test_web_port_is_derived_from_the_cluster_port_and_written_to_its_config(tmp_path):
    a, b = ClusterSpec(state_dir=Path("/a"), port=20000), ClusterSpec(state_dir=Path("/b"), port=21000)
    assert a.web_port != b.web_port and a.web_port == 20000 + specmod.WEB_PORT_OFFSET
    assert a.web_port not in {a.node_port(i) for i in range(1, 65)}
    toml = tmp_path / "gpupack.toml"
    toml.write_text(specmod.gpupack_toml(a, 5, 79.6))
    web = load_web_settings(toml)
    assert (web.bind, web.port) == ("127.0.0.1", a.web_port)
    assert a.web_url == f"http://127.0.0.1:{a.web_port}/"
