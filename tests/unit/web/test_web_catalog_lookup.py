"""The web view reads slice sizes from the catalogue of the packer's `gpu_model`."""
from packer.config import PackerConfig
from slurm_plugin.web.source import catalog_lookup


def test_profiles_come_from_the_configured_model():
    assert catalog_lookup(PackerConfig())("1g.10gb") == (1, 9984)  # H100-80GB, not A100-80GB's 9728
    assert catalog_lookup(PackerConfig(gpu_model="A100-80GB"))("1g.10gb") == (1, 9728)
    assert catalog_lookup(PackerConfig(gpu_model="", shares_per_gpu=8))("3g.40gb") is not None
