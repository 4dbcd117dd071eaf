"""The `kernelopt tune` page in a real headless browser (Chromium driven by Selenium) against the
scripted OpenAI-compatible server and real evaluations on the CPU: candidates appear live in the
tree, a hint reaches the model, a hand edit gets its verdict, diffs show, accept writes the file,
and the page without the token is refused. Skipped where Chromium, chromedriver or selenium is
missing (scripts/setup.sh installs them when run as root).

KERNELOPT_UPDATE_SCREENSHOT=1 also saves the page to docs/tune.png (the README shows it)."""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import REPO
from llm_server import ScriptedLLMServer

from kernelopt import Session
from kernelopt.tune.server import TuneServer
from kernelopt.tune.workbench import Workbench

PROBLEM = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
QUICK_EVAL = {"timing_budget": 1, "correctness_trials": 2}
PROGRAM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
{body}
"""
SLOW = PROGRAM.format(body="        unused = x.t() @ x\n        return torch.softmax(x, dim=-1)")
FAST = PROGRAM.format(body="        return torch.softmax(x, dim=-1)")
HAND = PROGRAM.format(body="        # by hand <img src=x onerror=\"document.title='pwned'\">\n        return torch.softmax(x, -1)")
WAIT_S = 120


def browser_paths() -> tuple[str, str] | None:
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def answer(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium; "
                                                                   "scripts/setup.sh installs it)")
    paths = browser_paths()
    if paths is None:
        pytest.skip("needs Chromium and chromedriver (apt-get install chromium chromium-driver; "
                    "scripts/setup.sh installs them when run as root)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,720"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(paths[1]), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def workbench(monkeypatch, tmp_path):
    """(LLM server, tune server): the model answers FAST to a hint about a fused softmax, else SLOW."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    def script(body, index):
        text = "\n".join(m["content"] for m in body["messages"])
        return answer(FAST) if "fused softmax" in text else answer(SLOW)

    with ScriptedLLMServer(script) as llm:
        session = Session.open(PROBLEM, model="test-model", base_url=llm.url, device="cpu",
                               store=tmp_path / "s.sqlite", eval_options=QUICK_EVAL)
        with TuneServer(Workbench(session)) as tune:
            yield llm, tune


def wait_for(driver, condition, message: str):
    """Until `condition(driver)` holds. The page redraws the tree on every event, so an element
    found a moment ago may be gone: that is a reason to look again, not a failure."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition, message)


def node_status(driver, number: int) -> str | None:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f'li.candidate[data-number="{number}"] > .node .status')
    return found[0].text if found else None


def click(driver, css: str) -> None:
    from selenium.webdriver.common.by import By

    def clicked(d) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    wait_for(driver, clicked, f"could not click {css}")


def test_the_workbench_drives_a_session_from_the_browser(browser, workbench, tmp_path):
    from selenium.webdriver.common.by import By

    llm, tune = workbench
    browser.get(tune.base_url + "/")
    assert "forbidden" in browser.find_element(By.TAG_NAME, "body").text        # no token, no page

    browser.get(tune.url)
    wait_for(browser, lambda d: d.find_element(By.ID, "live").text == "live", "the event stream did not open")
    click(browser, "#ask")                                                     # from scratch, no hint
    wait_for(browser, lambda d: node_status(d, 1) == "correct", "candidate 1 did not arrive")

    click(browser, 'li.candidate[data-number="1"] > .node')                    # refine it with a hint
    browser.find_element(By.ID, "hint").send_keys("use a fused softmax")
    click(browser, "#ask")
    wait_for(browser, lambda d: node_status(d, 2) == "correct", "candidate 2 did not arrive")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'li[data-number="1"] li[data-number="2"]'),
             "2 is not a child of 1")
    assert "use a fused softmax" in llm.user_texts()[-1]
    assert "unused = x.t() @ x" in llm.user_texts()[-1]                        # the prompt refines 1

    click(browser, 'li.candidate[data-number="2"] > .node')
    click(browser, '#tabs button[data-tab="diff"]')
    wait_for(browser, lambda d: "-        unused = x.t() @ x" in d.find_element(By.ID, "diff").text,
             "the diff against the parent did not show")
    click(browser, '#tabs button[data-tab="verdict"]')
    verdict = browser.find_element(By.ID, "verdict").text
    assert "correct" in verdict and "Correctness trials" in verdict
    assert "Where the time goes" in verdict and "aten::_softmax" in verdict  # a session profiles by default

    click(browser, '#tabs button[data-tab="edit"]')                            # a hand edit of 2
    browser.execute_script("arguments[0].value = arguments[1]", browser.find_element(By.ID, "editor"), HAND)
    click(browser, "#submit-edit")
    wait_for(browser, lambda d: node_status(d, 3) == "correct", "the hand edit got no verdict")
    click(browser, 'li.candidate[data-number="3"] > .node')
    click(browser, '#tabs button[data-tab="code"]')
    wait_for(browser, lambda d: "<img src=x" in d.find_element(By.ID, "code").text, "the code did not show")
    assert not browser.find_elements(By.CSS_SELECTOR, "#code img") and browser.title == "kernelopt tune"
    wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, 'li[data-number="2"] li[data-number="3"] .source')
             .text == "hand", "the hand edit is not a child of 2")

    target = tmp_path / "kept" / "softmax.py"
    click(browser, '#tabs button[data-tab="accept"]')
    browser.find_element(By.ID, "accept-path").send_keys(str(target))
    click(browser, "#accept")
    # The folder is outside the working directory: the page asks before creating it.
    wait_for(browser, lambda d: _alert_text(d) and "Create the folder?" in _alert_text(d), "no confirmation asked")
    browser.switch_to.alert.accept()
    wait_for(browser, lambda d: "kernelopt eval" in d.find_element(By.ID, "accepted").text, "accept showed nothing")
    assert target.read_text() == HAND
    assert browser.find_elements(By.CSS_SELECTOR, "#chart path.line")
    usage = browser.find_element(By.ID, "usage").text
    assert usage.startswith("2 calls") and "3 evaluations" in usage
    assert "cost unknown (no price)" in usage  # no --price: unknown, not $0

    click(browser, 'li.candidate[data-number="2"] > .node')
    click(browser, '#tabs button[data-tab="diff"]')
    wait_for(browser, lambda d: "+        # by hand" not in d.find_element(By.ID, "diff").text, "diff stale")
    shot = tmp_path / "tune.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("KERNELOPT_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, REPO / "docs" / "tune.png")


def _alert_text(browser) -> str | None:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return browser.switch_to.alert.text
    except NoAlertPresentException:
        return None


def test_the_verdict_of_a_problem_with_several_input_configurations_shows_each(browser, monkeypatch, tmp_path):
    """A hand-written candidate on a problem with SHAPES: the verdict tab lists every
    configuration, held-out ones marked, beside the geometric-mean speedup."""
    from selenium.webdriver.common.by import By

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    shaped = REPO / "tests" / "adversarial" / "problems" / "ShapedSoftmax.py"
    copy = shaped.read_text().replace("class Model(", "class ModelNew(")
    with ScriptedLLMServer(lambda body, index: answer(copy)) as llm:
        session = Session.open(shaped, model="test-model", base_url=llm.url, device="cpu",
                               store=tmp_path / "s.sqlite", eval_options=QUICK_EVAL)
        submitted = session.submit(copy)
        assert submitted.correct, submitted.verdict
        with TuneServer(Workbench(session)) as tune:
            browser.get(tune.url)
            wait_for(browser, lambda d: node_status(d, 1) == "correct", "the hand-written candidate did not show")
            click(browser, 'li.candidate[data-number="1"] > .node')
            click(browser, '#tabs button[data-tab="verdict"]')
            wait_for(browser, lambda d: "Input configurations" in d.find_element(By.ID, "verdict").text,
                     "no configurations in the verdict")
            rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#verdict table.shapes tr")][1:]
            shot = tmp_path / "shapes.png"
            assert browser.save_screenshot(str(shot))
    assert [row.split(" correct")[0] for row in rows] == [
        "default", "batch_size=16 dim=4096", "batch_size=37 dim=1500 (held out)"]
    assert all(row.endswith("%") for row in rows)  # each with its speedup and interval
