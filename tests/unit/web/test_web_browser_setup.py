"""Where the browser tests get their browser: Debian's paths, and a clear message when absent."""
from __future__ import annotations

import pytest

from slurm_plugin.web import browser


def test_a_missing_browser_is_named_with_the_package_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(browser, "CHROMEDRIVER", tmp_path / "chromedriver")
    absent = browser.missing()
    assert any("apt-get install chromium)" in a for a in absent)
    assert any("apt-get install chromium-driver)" in a for a in absent)
    with pytest.raises(browser.BrowserMissing, match="apt-get install chromium"):
        browser.chromium()
