"""The cap on a GPU's summed utilisation (the patent's 95 %), beside the memory cap."""
import pytest

from packer.config import ConfigError, PackerConfig
from packer.utilisation_cap import check_util, first_under_cap


def test_the_sum_with_the_newcomer_must_stay_at_or_under_the_cap():
    assert check_util([40.0], 55.0, 95.0).fits  # 95 %: at the cap
    over = check_util([40.0, 30.0], 26.0, 95.0)
    assert not over.fits and over.total_pct == 96.0 and over.text() == "96%/95%"


def test_an_unknown_utilisation_adds_nothing_and_is_counted():
    check = check_util([None, 50.0], None, 95.0)
    assert check.fits and check.unknown == 2 and check.total_pct == 50.0


def test_the_first_gpu_under_the_cap_or_the_least_loaded_refusal():
    gpus = [("n1:0", [80.0]), ("n1:1", [30.0]), ("n2:0", [10.0])]
    assert first_under_cap(gpus, 50.0, 95.0)[0] == "n1:1"
    gpu, check = first_under_cap(gpus[:1] + [("n1:1", [70.0])], 50.0, 95.0)
    assert gpu is None and check.total_pct == 120.0
    assert first_under_cap([], 50.0, 95.0) == (None, None)
    with pytest.raises(ValueError):
        check_util([], 1.0, -5.0)


def test_the_cap_is_a_setting_off_by_default():
    assert PackerConfig().max_gpu_util_pct == 0.0 and check_util([90.0, 90.0], 90.0, 0.0).fits
    assert PackerConfig(max_gpu_util_pct=95.0).max_gpu_util_pct == 95.0
    with pytest.raises(ConfigError, match="max_gpu_util_pct"):
        PackerConfig(max_gpu_util_pct=-1)
