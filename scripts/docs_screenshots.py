"""Regenerate docs/img/top.png, top-80x24.png, web.png (1400×900) and web-800.png (800×600) from a demo town.

Run with the project's venv: ``.venv/bin/python scripts/docs_screenshots.py``.
It needs Debian's chromium and chromium-driver (scripts/test installs them)
and selenium (the ``test`` extra).  The top frame is rendered by rich exactly
as ``sluice top`` draws it, saved as SVG and photographed by headless
chromium; the dashboard is photographed by chromium through Selenium.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def main() -> None:
    from rich.console import Console

    from sluice.api import Town as Facade
    from sluice.executors import get_executor
    from sluice.scheduler.launch.sling import sling
    from sluice.scheduler.unattended.daemon import Daemon
    from sluice.surfaces.demo import build_town
    from sluice.surfaces.top import render
    from sluice.surfaces.web.serve import make_web

    IMG.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="sluice-shots-"))
    os.environ["SLUICE_DEMO_WORK_SECONDS"] = "120"  # the polecats stay running for the pictures
    town, epics = build_town(root)
    os.environ["SLUICE_TOWN"] = str(town.root)
    try:
        facade = Facade(town)
        facade.config_set("scheduler.token_budget", "400000")  # so the header shows admission's lines too
        facade.config_set("scheduler.label_caps.docs", "1")
        sling(town, epics)
        Daemon(town, interval=1.0, echo=lambda _line: None).tick()
        time.sleep(2)

        console = Console(file=io.StringIO(), record=True, width=128, height=44, force_terminal=True,
                          color_system="truecolor")
        console.print(render(facade.snapshot(), height=44, width=128), height=44)
        svg = root / "top.svg"
        console.save_svg(str(svg), title="sluice top")
        subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={IMG / 'top.png'}", "--window-size=1300,1060", svg.as_uri()],
                       check=True, capture_output=True, timeout=120)
        small = Console(file=io.StringIO(), record=True, width=80, height=24, force_terminal=True,
                        color_system="truecolor")
        small.print(render(facade.snapshot(), height=24, width=80), height=24)
        svg = root / "top-80x24.svg"
        small.save_svg(str(svg), title="sluice top at 80×24")
        subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={IMG / 'top-80x24.png'}", "--window-size=840,620", svg.as_uri()],
                       check=True, capture_output=True, timeout=120)

        web = make_web(facade, port=0, token="docs-screenshot-token")
        web.start()
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        os.environ.setdefault("SE_OFFLINE", "true")
        options = Options()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
        try:
            for name, (width, height) in (("web.png", (1400, 900)), ("web-800.png", (800, 600))):
                driver.set_window_size(width, height)
                driver.get(web.url)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not driver.execute_script(
                        "return document.querySelectorAll('#queue tr[data-item]').length"):
                    time.sleep(0.2)
                driver.save_screenshot(str(IMG / name))
        finally:
            driver.quit()
            web.stop()
    finally:
        executor = get_executor(town)
        for polecat in executor.active():
            executor.stop(polecat.id)
        shutil.rmtree(root, ignore_errors=True)
    print(f"wrote top.png, top-80x24.png, web.png and web-800.png in {IMG}", file=sys.stderr)


if __name__ == "__main__":
    main()
