"""Headless Chromium from Debian's packages, driven by Selenium: for the browser tests and
the web view's screenshots. Nothing here downloads a browser or a driver: the paths are
Debian's (`apt-get install chromium chromium-driver`) and Selenium Manager is kept offline.

    python3 -m slurm_plugin.web.browser http://127.0.0.1:PORT/ docs/img/web-overview.png
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


class BrowserMissing(RuntimeError):
    """Chromium, its driver or Selenium is not installed; the message says how to install it."""


def missing() -> list[str]:
    """What is not installed, as install instructions (empty when everything is)."""
    out = []
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            out.append(f"{path} (apt-get install {pkg})")
    try:
        import selenium  # noqa: F401
    except ImportError:
        out.append("the selenium Python package (pip install selenium, or scripts/install-deps.sh)")
    return out


def chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium WebDriver; BrowserMissing names what to install."""
    absent = missing()
    if absent:
        raise BrowserMissing("the browser tests need " + "; ".join(absent))
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


def screenshot(url: str, out: Path, width: int = 1400, height: int = 1000) -> None:
    """A PNG of the whole page at `url` (the window grown to the page's height)."""
    driver = chromium(width, height)
    try:
        driver.get(url)
        full = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
        driver.set_window_size(width, min(max(height, int(full) + 40), 4000))
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.exit("usage: python3 -m slurm_plugin.web.browser URL OUT.png")
    screenshot(args[0], Path(args[1]))


if __name__ == "__main__":
    main()
