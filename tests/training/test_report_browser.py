"""The ``tempo-rl report`` page in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``).

Selenium drives ``/usr/bin/chromedriver`` given by path, so Selenium Manager never downloads a browser or a
driver. Without Chromium (or selenium) these tests skip, naming what is missing; with
``TEMPO_REQUIRE_BROWSER=1`` (CI sets it) they fail instead.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_runs import killed_copy, records, scripted_run_dir

from tempo_rl.training.report import write_report

pytest.importorskip("plotly")

CHROMIUM = ("chromium", "chromium-browser")
CHROMEDRIVER = "chromedriver"


def _missing_browser(reason: str) -> None:
    if os.environ.get("TEMPO_REQUIRE_BROWSER") == "1":
        pytest.fail(f"TEMPO_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(f"{reason} (install them: apt-get install chromium chromium-driver; pip install selenium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing_browser("selenium is not installed")
    binary = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    driver_path = shutil.which(CHROMEDRIVER)
    if binary is None or driver_path is None:
        _missing_browser("no chromium / chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(120)
    driver.implicitly_wait(10)  # what an expand builds appears on the toggle event, just after the click
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = scripted_run_dir(tmp_path_factory.mktemp("browser") / "run")
    write_report(run)
    return run


def _open(browser: Any, page: Path) -> list[dict[str, Any]]:
    """Load ``page`` and return the browser's log entries of the load."""
    browser.get(page.as_uri())
    browser.find_element("css selector", "#f-count")  # the page's script ran
    return list(browser.get_log("browser"))


def _errors(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in log if e.get("level") in ("SEVERE", "ERROR")]


def test_the_page_loads_with_no_console_error_and_fetches_nothing(browser: Any, run_dir: Path) -> None:
    browser.get("about:blank")
    browser.get_log("browser")  # drop what came before
    log = _open(browser, run_dir / "report.html")
    assert not _errors(log), log
    updates = browser.find_elements("css selector", "details.update")
    assert [u.get_attribute("data-update") for u in updates] == ["0", "1", "2", "3"]
    assert len(browser.find_elements("css selector", ".js-plotly-plot")) >= 8  # the curves were drawn
    remote = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => !n.startsWith('file:') && !n.startsWith('data:'))"
    )
    assert remote == []
    assert browser.find_element("id", "banner").get_attribute("hidden") is not None  # complete: no banner


def test_expanding_a_start_shows_its_branches_with_the_recorded_numbers(browser: Any, run_dir: Path) -> None:
    _open(browser, run_dir / "report.html")
    recs = [r for r in records(run_dir) if r["update"] == 2]
    update = browser.find_element("css selector", 'details.update[data-update="2"]')
    update.find_element("tag name", "summary").click()
    starts = update.find_elements("css selector", "details.start")
    assert len(starts) == 2
    for index, start in enumerate(starts):
        built = "return arguments[0].querySelectorAll('table.branches').length"
        assert browser.execute_script(built, start) == 0  # built only when expanded
        start.find_element("tag name", "summary").click()
        group = [r for r in recs if r["start_id"] == start.get_attribute("data-start")]
        rows = start.find_elements("css selector", "table.branches tbody tr")
        assert len(rows) == len(group) == 4, f"start {index}"
        for row, rec in zip(rows, group):
            values = [c.get_attribute("data-v") for c in row.find_elements("css selector", "td[data-v]")]
            expected = [sum(rec["rewards"]), rec["endpoint_value"], rec["return"], rec["advantage"]]
            assert [float(v) for v in values] == pytest.approx(expected, abs=0, rel=1e-15)
        samples = start.find_elements("css selector", ".critic table.samples tbody tr")
        critic = group[0]["start"]["critic"]
        assert len(samples) == len(critic["samples"]) == 4
        for row, sample in zip(samples, critic["samples"]):
            cells = row.find_elements("css selector", "td")
            assert float(cells[1].get_attribute("data-v")) == sample["value"]
            assert cells[5].text == sample["text"]
        # a branch's turns: its actions and observations as recorded
        branch = start.find_element("css selector", "details.branch")
        branch.find_element("tag name", "summary").click()
        turns = branch.find_elements("css selector", "table.turns tbody tr")
        assert [t.find_elements("tag name", "td")[1].text.split("\n")[0] for t in turns] == group[0][
            "actions"
        ]
        assert [t.find_elements("tag name", "td")[2].text for t in turns] == group[0]["observations"]


def test_filters_and_search_narrow_the_start_states(browser: Any, run_dir: Path) -> None:
    from selenium.webdriver.support.ui import Select

    _open(browser, run_dir / "report.html")
    recs = records(run_dir)
    total = len({(r["update"], r["start_id"]) for r in recs})
    count = browser.find_element("id", "f-count")
    assert count.text == f"4 updates, {total} start states shown"
    Select(browser.find_element("id", "f-outcome")).select_by_value("won")
    won = {(r["update"], r["start_id"]) for r in recs if r["won"]}
    assert count.text == f"{len({u for u, _ in won})} updates, {len(won)} start states shown"
    Select(browser.find_element("id", "f-outcome")).select_by_value("")
    Select(browser.find_element("id", "f-phase")).select_by_value("td")
    td = {(r["update"], r["start_id"]) for r in recs if r["phase"] == "td"}
    assert count.text == f"3 updates, {len(td)} start states shown"
    Select(browser.find_element("id", "f-phase")).select_by_value("")
    search = browser.find_element("id", "f-q")
    search.send_keys("take blue")
    starts: dict[tuple[int, str], list[str]] = {}
    for r in recs:  # the searched text: the start's and its branches' text, critic samples included
        text = starts.setdefault((r["update"], r["start_id"]), [r["game_id"]])
        text += r["actions"] + r["observations"]
        text += (
            [s["text"] for m in r["boundaries"] for s in m["critic"]["samples"]] if "boundaries" in r else []
        )
        if "start" in r:
            st = r["start"]
            text += [st["task"], st["observation"], *st["history_actions"]]
            text += [s["text"] for s in st["critic"]["samples"]] if st["critic"] else []
    hits = {key for key, text in starts.items() if "take blue" in "\n".join(text).lower()}
    assert hits and len(hits) < total
    expected = f"{len({u for u, _ in hits})} updates, {len(hits)} start states shown"
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda _: count.text == expected)  # the search is debounced


def test_a_killed_run_is_shown_partial(browser: Any, run_dir: Path, tmp_path: Path) -> None:
    killed = killed_copy(run_dir, tmp_path / "killed")
    page = write_report(killed)
    log = _open(browser, page)
    assert not _errors(log), log
    banner = browser.find_element("id", "banner")
    assert banner.is_displayed()
    assert banner.text.startswith("Partial run")
    assert "3 of the 4 updates" in banner.text


def test_a_screenshot_of_the_main_view_is_not_blank(browser: Any, run_dir: Path) -> None:
    from PIL import Image

    _open(browser, run_dir / "report.html")
    image = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    colours = image.getcolors(maxcolors=image.width * image.height)  # [(count, colour)]
    assert colours is not None
    background = max(count for count, _ in colours)
    assert len(colours) > 50, "the page shows almost no distinct colour"
    assert 1 - background / (image.width * image.height) > 0.15, "over 85% of the view is one colour"
    # the header band and a chart are drawn where the main view puts them
    assert image.getpixel((10, 10)) != image.getpixel((10, image.height - 10))


def test_invalid_turns_quarantines_and_hostile_text_are_shown_as_text(browser: Any, tmp_path: Path) -> None:
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "store"))
    from storetest_helpers import state

    from tempo_rl.training.store import StateStore

    hostile = "</script><script>document.title='owned'</script><b>bold?</b>"
    start = {"task": "t", "history_actions": [], "observation": hostile, "parent_id": None, "critic": None}
    rec = {
        "update": 0, "phase": "td", "game_id": "g1", "start_id": "s1", "start_round": 0, "fresh": True,
        "start_macro_index": 0, "start_policy_version": 0, "policy_version": 0, "branch": 0,
        "actions": ["look", "fly"], "observations": ["ok", hostile], "invalid_turns": [False, True],
        "rewards": [0.0, 0.0], "invalid_actions": 1, "end_reason": "macro_boundary", "won": False,
        "return": 0.25, "endpoint_value": 0.25, "advantage": 0.0, "kept": True, "error": None, "start": start,
    }  # fmt: skip
    (tmp_path / "trajectories.jsonl").write_text(json.dumps(rec) + "\n")
    store = StateStore(tmp_path / "store.sqlite")
    bad = state([1], game="g1", version=0)
    store.add(bad)
    store.quarantine(bad.id, "ReplayDivergenceError: observation 1 differs", diff="-a\n+b")
    store.close()
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 4.0e9}) + "\n")  # after it
    log = _open(browser, write_report(tmp_path))
    assert not _errors(log), log
    assert browser.title.startswith("tempo-rl report")  # the observation's script did not run
    update = browser.find_element("css selector", 'details.update[data-update="0"]')
    assert "1 quarantined" in update.text
    update.find_element("tag name", "summary").click()
    quarantine = update.find_element("css selector", ".quarantine")
    assert (
        bad.id in quarantine.text
        and "ReplayDivergenceError" in quarantine.text
        and "-a\n+b" in quarantine.text
    )
    start_el = update.find_element("css selector", "details.start")
    start_el.find_element("tag name", "summary").click()
    assert hostile in start_el.find_element("css selector", ".panel pre.obs").text  # as text, not markup
    branch = start_el.find_element("css selector", "details.branch")
    branch.find_element("tag name", "summary").click()
    rows = branch.find_elements("css selector", "table.turns tbody tr")
    assert [r.get_attribute("class") or "" for r in rows] == ["", "invalid"]
    assert "invalid" in rows[1].find_elements("tag name", "td")[1].text
    assert rows[1].find_elements("tag name", "td")[2].text == hostile
