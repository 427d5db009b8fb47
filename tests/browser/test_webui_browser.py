"""The web UI in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`, driven
by Selenium; no browser download) fills llmload's start form, starts a short ladder against the
simulator, opens the Tokens tab when the run is over, and checks every figure it shows against
`scripts/sweep_table.py` on the same run (and requests/tokens against the simulator's truth);
then follows the "Live token charts" link and checks that both charts drew the two rungs' points,
with the sweep table's figures.

Needs: `apt-get install -y chromium chromium-driver` and the `browser` extra (selenium).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.webui import LocustWebUI, column_titles, post_processed, tab_as_post_processed, template_args

from llmload.core.files.records import read_records
from llmload.output.toolkit.cells import fmt_num
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--window-size=1400,900",
)
WAIT_S = 30  # longest wait for one element or state of the page


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            "needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver"
        )
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="needs selenium (pip install -e '.[browser]')"
    )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    options.add_argument(f"--user-data-dir={profile}")
    # an explicit driver path: Selenium Manager never looks for (or downloads) a driver
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def fill_form(driver, fields: dict[str, str]) -> None:
    """Open "Custom parameters" and type the llmload fields (inputs and selects by their name)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.find_element(By.XPATH, "//button[normalize-space()='Custom parameters']").click()
    for name, value in fields.items():
        element = wait_for(driver, By.NAME, name, displayed=True)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)


def wait_for(driver, by: str, value: str, *, displayed: bool = False):
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    condition = ec.visibility_of_element_located if displayed else ec.presence_of_element_located
    return WebDriverWait(driver, WAIT_S).until(condition((by, value)))


def read_tokens_tab(driver) -> list[dict[str, str]]:
    """Click the Tokens tab and read its table: one dict per row, keyed by column title."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, "//button[@role='tab'][normalize-space()='Tokens']").click()
    wait_for(driver, By.XPATH, "//th[normalize-space()='Agg tok/s']", displayed=True)
    table = driver.find_element(By.XPATH, "//table[.//th[normalize-space()='Agg tok/s']]")
    titles = [th.text.strip() for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    return [
        dict(zip(titles, [td.text.strip() for td in tr.find_elements(By.CSS_SELECTOR, "td")], strict=True))
        for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]


def read_chart(driver, chart: str) -> list[dict[str, str]]:
    """The points an llmload chart drew: series key, rung and value of each, once it has any."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    css = f"svg[data-chart='{chart}'] circle.point"
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))
    return [
        {key: dot.get_attribute(f"data-{key}") for key in ("series", "rung", "y")}
        for dot in driver.find_elements(By.CSS_SELECTOR, css)
    ]


def test_tokens_tab_in_chromium(tmp_path, sim_start, browser):
    from selenium.webdriver.common.by import By

    sim = sim_start(base_ms=5, per_seq_ms=1, api_key="sk-browser")
    with LocustWebUI(tmp_path, sim.url) as ui:
        title = column_titles(template_args(ui))
        browser.get(ui.url + "/")
        wait_for(browser, By.XPATH, "//button[normalize-space()='Custom parameters']", displayed=True)
        fill_form(
            browser,
            {
                "rungs": "1,2",
                "requestsPerUser": "2",
                "warmupRequests": "0",
                "maxTokens": "16",
                "model": "sim-model",
                "stream": "true",
                "apiKey": "sk-browser",
            },
        )
        key_field = browser.find_element(By.NAME, "apiKey")
        assert key_field.get_attribute("type") == "password"
        browser.find_element(By.XPATH, "//button[@type='submit'][normalize-space()='Start']").click()
        ui.wait_stopped(90)
        # the page's own poll has seen the end of the run (status shown in any letter case)
        wait_for(browser, By.XPATH, "//*[translate(normalize-space(), 'STOPED', 'stoped')='stopped']")
        shown = read_tokens_tab(browser)
        browser.save_screenshot(str(tmp_path / "webui.png"))
        # the sweep table's CSV sits beside Locust's own downloads
        browser.find_element(By.XPATH, "//button[@role='tab'][normalize-space()='Download Data']").click()
        link = wait_for(browser, By.PARTIAL_LINK_TEXT, "sweep table CSV", displayed=True)
        assert link.get_attribute("href") == ui.url + "/llmload/sweep.csv"
        browser.find_element(By.PARTIAL_LINK_TEXT, "Live token charts").click()
        sweep_points = read_chart(browser, "sweep")
        time_points = read_chart(browser, "over-time")
        browser.save_screenshot(str(tmp_path / "charts.png"))

    # the charts have points for both rungs, and the sweep curve's are the sweep table's figures
    assert {(p["series"], p["rung"]) for p in time_points} == {
        (series, rung) for series in ("agg_tok_s", "per_req_tok_s") for rung in ("rung01 c1", "rung02 c2")
    }

    expected = post_processed(ui.prefix)
    for series, column in (("agg_tok_s", "agg_tok/s"), ("per_req_tok_s", "per_req_tok/s")):
        drawn = [(p["rung"], fmt_num(float(p["y"]))) for p in sweep_points if p["series"] == series]
        assert drawn == [(pp["rung"], pp[column]) for pp in expected]
    assert [r[title["rung"]] for r in shown] == ["rung01 c1", "rung02 c2"]
    for row, pp in zip(shown, expected, strict=True):
        assert row[title["state"]] == "done"
        assert {key: row[title[key]] for key in tab_as_post_processed(pp)} == tab_as_post_processed(pp)
    # the form's fields reached the requests: 16 tokens each (the truth says so), the key was accepted
    truth, _ = load_truth(sim.truth_log)
    records, _ = read_records(Path(f"{ui.prefix}_records.jsonl"))
    assert len(records) == 2 * 1 + 2 * 2
    assert all(r.ok and truth[r.request_id]["completion_tokens"] == 16 for r in records)
