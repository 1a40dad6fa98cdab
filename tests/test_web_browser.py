"""The dashboard in a real headless Chromium (Debian's, driven by Selenium through chromium-driver)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.polecats import configure
from helpers.scheduler import item, sleeper, stop_polecats, wait_for, write_items
from helpers.web import TOKEN, WebServer
from sluice.store.files.town import Town

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SCRIPT_TITLE = "<script>document.title='owned'</script><img src=x onerror=\"document.title='owned'\">"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)),
                       reason="Debian's chromium or chromium-driver is missing (scripts/test installs them)"),
]


@pytest.fixture
def queued_files(cli, rigs) -> Iterator[Town]:
    """Rigs alpha and beta with items queued (a script for a title among them), two polecats at once."""
    write_items(cli.town, "alpha", [item("al-1", "first", priority=0), item("al-2", SCRIPT_TITLE)])
    write_items(cli.town, "beta", [item("be-1", "beta work")])
    configure(cli.town, {"scheduler.max_polecats": "2", "executor.command": sleeper(600)})
    cli.run("sling", "al-1", "al-2", "alpha")
    cli.run("sling", "be-1", "beta")
    yield Town(cli.town)
    stop_polecats(cli.town)


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a driver or a browser
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def web(queued_files) -> Iterator[WebServer]:
    server = WebServer(queued_files.root)
    yield server
    server.stop()


def _errors(driver, allowed=()) -> list[dict]:
    return [e for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def _text(driver, selector: str) -> str:
    return driver.execute_script(f"return document.querySelector({selector!r}).textContent")


def _cells(driver, selector: str) -> list[dict]:
    """Text and data attributes of the elements ``selector`` matches, read in one step: the stream
    redraws its tables whenever the snapshot changes (forecasts move with the clock), so an element
    found in one call may be gone by the next."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => ({text: e.innerText,"
        " polecat: e.getAttribute('data-polecat'), item: e.getAttribute('data-item')}))", selector)


def _click(driver, selector: str) -> None:
    """Click the element ``selector`` names, found afresh: one the stream redrew under the click is
    stale and was not clicked, so it is found and clicked again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def attempt() -> bool:
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
        except StaleElementReferenceException:
            return False
        return True

    wait_for(attempt, timeout=60)


def _alert(driver):
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert
        alert.text  # noqa: B018 - raises while there is none
        return alert
    except NoAlertPresentException:
        return None


def test_a_token_link_pasted_into_an_open_tab_is_taken(cli, web, browser):
    from selenium.webdriver.common.by import By

    browser.get(web.url)
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#queue tr[data-item]")) == 3, timeout=60)
    assert "connecting" not in browser.find_element(By.ID, "state").get_attribute("class")
    browser.execute_script("location.hash = arguments[0]", f"token={TOKEN}")  # what pasting the link does
    wait_for(lambda: "token" not in browser.current_url, timeout=60)
    assert browser.find_element(By.ID, "token").get_attribute("value") == TOKEN
    browser.find_element(By.ID, "pause").click()
    wait_for(lambda: cli.json("scheduler", "status")["paused"] is True, timeout=60)
    assert cli.json("scheduler", "status")["paused_by"] == "sluice web"


def test_the_dashboard_live_in_chromium(cli, web, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(web.url)
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")) == 3, timeout=60)
    rows = [r["item"] for r in _cells(browser, "#queue tbody tr")]
    assert browser.execute_script(  # numbers and their headers line up on the right
        "return getComputedStyle(document.querySelector('#queue th.num')).textAlign") == "right"
    assert rows == [r["id"] for r in cli.json("scheduler", "list")]  # the CLI's dispatch order
    cells = _cells(browser, '#queue tr[data-item="al-1"] td.num')
    assert any(re.fullmatch(r"\d\d:\d\d", c["text"]) for c in cells)  # its forecast start and finish, UTC
    assert "drains ≈" in _text(browser, "#summary")

    # An agent's title is text: shown literally, nothing injected, nothing run.
    [title_cell] = _cells(browser, '#queue tr[data-item="al-2"] td.title')
    assert title_cell["text"] == SCRIPT_TITLE
    assert browser.execute_script("return document.querySelectorAll('main script, main img').length") == 0
    assert browser.title == "sluice"

    # A polecat appears live after a sling and a cycle, without reloading the page.
    assert browser.find_elements(By.CSS_SELECTOR, "#polecats tbody tr[data-polecat]") == []
    assert _text(browser, "#polecats td.empty") == "no polecat running"  # an empty table says so
    cli.run("scheduler", "run")
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#polecats tbody tr[data-polecat]")) == 1,
             timeout=60)
    running = cli.json("polecat", "list")[0]
    [row] = _cells(browser, "#polecats tbody tr[data-polecat]")
    assert running["item_id"] in row["text"] and "first" in row["text"]  # with its item's title
    assert row["polecat"] == running["id"]
    assert _errors(browser) == [], "the page logged console errors"

    # Pause without the token is refused and changes nothing.
    browser.find_element(By.ID, "pause").click()
    wait_for(lambda: "refused (403)" in _text(browser, "#message"), timeout=60)
    assert cli.json("scheduler", "status")["paused"] is False
    assert "active" in _text(browser, "#state")

    # With the token it pauses, and the header shows it from the stream.
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "pause").click()
    wait_for(lambda: _text(browser, "#state").startswith("PAUSED by sluice web"), timeout=60)
    assert cli.json("scheduler", "status")["paused"] is True

    ARTIFACTS.mkdir(exist_ok=True)
    for target in (tmp_path / "dashboard.png", ARTIFACTS / "web-dashboard.png"):
        assert browser.save_screenshot(str(target)) and target.stat().st_size > 10_000
    assert _errors(browser, allowed=["/api/pause - Failed to load resource"]) == []


def test_the_item_page_explains_and_the_token_comes_from_the_start_up_url(cli, web, browser):
    from selenium.webdriver.common.by import By

    browser.get(web.url + "item/al-2")
    wait_for(lambda: _text(browser, "#score") != "", timeout=60)
    assert _text(browser, "#item-title") == SCRIPT_TITLE and browser.title == "sluice · al-2"
    reasons = [li["text"] for li in _cells(browser, "#reasons li")]
    assert reasons[0] == "priority=2" and any(r.startswith("cost=") for r in reasons)
    assert float(_text(browser, "#score")) == next(
        r["score"] for r in cli.json("scheduler", "list") if r["id"] == "al-2")
    explain = cli.json("scheduler", "explain", "al-2")
    why = [li["text"] for li in _cells(browser, "#why li")]
    assert why == ([f"{r['code']}: {r['detail']}" if r["detail"] else r["code"] for r in explain["reasons"]]
                   or ["nothing: the next cycle launches it"])
    assert "start ≈" in _text(browser, "#facts") and "runs of" not in _text(browser, "#facts")  # no history

    browser.get(f"{web.url}#token={TOKEN}")
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")) == 3, timeout=60)
    assert "token" not in browser.current_url  # dropped from the address bar
    button = '#queue tr[data-item="be-1"] button'
    _click(browser, button)  # asks first; saying no changes nothing
    alert = wait_for(lambda: _alert(browser), timeout=60)
    assert "be-1" in alert.text
    alert.dismiss()
    assert [r["id"] for r in cli.json("scheduler", "list")] == ["al-1", "al-2", "be-1"]
    _click(browser, button)
    wait_for(lambda: _alert(browser), timeout=60).accept()
    wait_for(lambda: [r["id"] for r in cli.json("scheduler", "list")] == ["al-1", "al-2"], timeout=60)
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")) == 2, timeout=60)
    assert _errors(browser) == []


def test_a_queue_longer_than_the_page_carries_is_counted_whole(cli, rigs, browser):
    """The page gets the queue's first rows and says how many of how many it shows, also per rig."""
    from selenium.webdriver.common.by import By

    from sluice.surfaces.web.app import QUEUE_ROWS

    extra = 3
    ids = [f"al-{n}" for n in range(QUEUE_ROWS + extra)]
    write_items(cli.town, "alpha", [item(i) for i in ids])
    write_items(cli.town, "beta", [item("be-1")])
    configure(cli.town, {"scheduler.max_polecats": "2"})
    cli.run("sling", *ids, "alpha")
    cli.run("sling", "be-1", "beta")
    server = WebServer(cli.town)
    try:
        browser.get(server.url)
        whole = f"({QUEUE_ROWS} of {QUEUE_ROWS + extra + 1} shown)"
        wait_for(lambda: _text(browser, "#queue-count") == whole, timeout=60)
        assert len(browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")) == QUEUE_ROWS
        from selenium.webdriver.support.ui import Select

        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, '#rig option[value="beta"]'), timeout=60)
        Select(browser.find_element(By.ID, "rig")).select_by_value("beta")
        # beta's one queued item, counted from the rig's figures whether or not it is among the rows
        wait_for(lambda: _text(browser, "#queue-count") in ("(0 of 1 shown)", "(1)"), timeout=60)
    finally:
        server.stop()
