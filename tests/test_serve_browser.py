"""The `nmt serve` page in a real headless Chromium (Debian's chromium + chromium-driver): type a
sentence, press Translate, read the translation (equal to the API's) and see the heatmap drawn;
switch it to the decoder's masked self-attention and back."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real Chromium
pytest.importorskip("fastapi")
selenium = pytest.importorskip("selenium")
import httpx  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402
from test_serve import start_server, stop_server  # noqa: E402
from test_translate import build_tiny_model_dir  # noqa: E402

from nmt.dirs import ModelDir  # noqa: E402

CHROMIUM = os.environ.get("NMT_CHROMIUM", "/usr/bin/chromium")
DRIVER = os.environ.get("NMT_CHROMEDRIVER", "/usr/bin/chromedriver")
SENTENCES = ["a man in a blue shirt is riding his bike .", "two dogs play in the snow ."]

# the canvas pixels that are not white, and the cells the page says it drew
INK = """
const c = document.getElementById('heatmap');
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let ink = 0;
for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250) ink++;
return [ink, +c.dataset.rows, +c.dataset.cols];
"""


# per drawn cell, whether its pixel is white (weight 0 draws white), row by row
CELLS = """
const c = document.getElementById('heatmap');
const {rows, cols, left, top, cell} = c.dataset;
const ctx = c.getContext('2d');
const white = [];
for (let r = 0; r < +rows; r++) {
  const row = [];
  for (let k = 0; k < +cols; k++) {
    const x = +left + k * +cell + +cell / 2, y = +top + r * +cell + +cell / 2;
    const [red, green, blue] = ctx.getImageData(x, y, 1, 1).data;
    row.push(red === 255 && green === 255 && blue === 255);
  }
  white.push(row);
}
return white;
"""


def drawn(browser, kind: str) -> None:
    """Wait until the canvas shows `kind`."""
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.ID, "heatmap").get_attribute("data-kind") == kind
    )


def results(browser) -> list:
    """The page's result items, one per input line."""
    return browser.find_elements(By.CSS_SELECTOR, "#results > li")


def find_binary(path: str) -> str | None:
    return path if Path(path).exists() else shutil.which(Path(path).name)


@pytest.fixture(scope="module")
def browser():
    chromium, driver = find_binary(CHROMIUM), find_binary(DRIVER)
    if chromium is None or driver is None:
        pytest.skip(
            f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {DRIVER}); "
            "`make test` installs them (apt-get install chromium chromium-driver)"
        )
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,1000", "--force-device-scale-factor=1"):  # fmt: skip
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url = start_server(build_tiny_model_dir(tmp_path_factory.mktemp("page")))
    yield url
    stop_server(proc)


def test_page_translates_and_draws_the_heatmap(browser, server):
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
    box = browser.find_element(By.ID, "source")
    box.clear()
    box.send_keys("\n".join(SENTENCES))
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results > li > .translation")) == 2)

    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#results > li > .translation")]
    api = httpx.post(server + "/translate", json={"text": SENTENCES}).json()["translations"]
    assert shown == [t["hypotheses"][0]["translation"] for t in api]
    cut = [li.find_elements(By.CSS_SELECTOR, ".cut") for li in results(browser)]
    assert [bool(c) for c in cut] == [t["hypotheses"][0]["at_limit"] for t in api]
    assert all(c[0].text == "stopped at the length limit: may be cut short" for c in cut if c)
    assert "server" in browser.find_element(By.ID, "timings").text

    ink, rows, cols = browser.execute_script(INK)
    record = httpx.post(server + "/translate", json={"text": SENTENCES[0], "with_attention": True})
    hyp = record.json()["translations"][0]
    assert (rows, cols) == (len(hyp["hypotheses"][0]["tokens"]) + 1, len(hyp["source_tokens"]))
    assert ink > rows * cols * 100  # coloured cells (24 px squares) and labels, not a blank canvas

    browser.find_elements(By.CSS_SELECTOR, "#results > li")[1].click()  # the other sentence's map
    assert browser.find_element(By.ID, "attention-title").text == "(sentence 2)"
    assert "selected" in browser.find_elements(By.CSS_SELECTOR, "#results > li")[1].get_attribute(
        "class"
    )


def test_page_switches_to_the_decoders_masked_self_attention(browser, server):
    """The decoder kind draws <s> + the shown translation on both axes, white above the
    diagonal (weight 0) and the darkest cell top left (<s> attends only to itself)."""
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
    kinds = Select(browser.find_element(By.ID, "attention-kind"))
    assert [o.get_attribute("value") for o in kinds.options if o.is_enabled()] == [
        "cross", "self", "decoder",
    ]  # fmt: skip
    box = browser.find_element(By.ID, "source")
    box.clear()
    box.send_keys(SENTENCES[0])
    browser.find_element(By.ID, "translate").click()
    drawn(browser, "cross")
    cross = browser.execute_script(INK)[1:]

    kinds.select_by_value("decoder")
    drawn(browser, "decoder")
    _, rows, cols = browser.execute_script(INK)
    best = httpx.post(server + "/translate", json={"text": SENTENCES[0]}).json()["translations"]
    body = {"text": SENTENCES[0], "target": best[0]["hypotheses"][0]["translation"],
            "kind": "decoder"}  # fmt: skip
    api = httpx.post(server + "/attention", json=body).json()
    assert rows == cols == len(api["rows"]) > 1
    white = browser.execute_script(CELLS)
    assert all(white[r][c] for r in range(rows) for c in range(r + 1, cols))  # the future: 0
    assert not white[0][0]
    assert browser.find_element(By.ID, "attention-axes").text.startswith("Rows and columns: <s>")

    kinds.select_by_value("cross")  # back to /translate's map
    drawn(browser, "cross")
    assert browser.execute_script(INK)[1:] == cross


def test_page_samples_alternatives_as_the_api_does(browser, server):
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
    assert browser.find_element(By.ID, "temperature").get_attribute("disabled") == "true"
    browser.find_element(By.ID, "sample").click()
    assert browser.find_element(By.ID, "beam").get_attribute("disabled") == "true"
    for field, value in (("nbest", "3"), ("temperature", "0.7"), ("seed", "4")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    box = browser.find_element(By.ID, "source")
    box.clear()
    box.send_keys("\n".join(SENTENCES))
    browser.find_element(By.ID, "translate").click()
    items = "#results > li"
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, items + " .alternative")) == 4)

    body = {"text": SENTENCES, "nbest": 3, "sampling": {"temperature": 0.7, "seed": 4}}
    api = httpx.post(server + "/translate", json=body).json()["translations"]
    for li, record in zip(browser.find_elements(By.CSS_SELECTOR, items), api, strict=True):
        best = li.find_element(By.CSS_SELECTOR, ":scope > .translation").text
        rest = [e.text for e in li.find_elements(By.CSS_SELECTOR, ".alternative")]
        want = [
            " ".join(h["translation"].split()) for h in record["hypotheses"]
        ]  # as HTML shows it
        assert [best, *rest] == want
    ink, rows, cols = browser.execute_script(INK)
    assert rows == len(api[0]["hypotheses"][0]["tokens"]) + 1 and ink > 0  # the first sample's map


def test_page_splits_sentences_as_the_api_does(browser, server):
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
    browser.find_element(By.ID, "split").click()
    assert browser.find_element(By.ID, "sample").get_attribute("disabled") == "true"
    assert browser.find_element(By.ID, "nbest").get_attribute("disabled") == "true"
    paragraph = "A man in a blue shirt is riding his bike. Two dogs play in the snow."
    box = browser.find_element(By.ID, "source")
    box.clear()
    box.send_keys(paragraph)
    browser.find_element(By.ID, "translate").click()
    items = "#results > li"
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, items)) == 1)
    beam = httpx.get(server + "/info").json()["decoding"]["beam_size"]  # what the page sends
    body = {"text": [paragraph], "split_sentences": True, "beam_size": beam}
    api = httpx.post(server + "/translate", json=body).json()["translations"]
    assert len(api[0]["sentences"]) == 2
    shown = browser.find_element(By.CSS_SELECTOR, items + " > .translation").text
    assert shown == " ".join(api[0]["hypotheses"][0]["translation"].split())
    assert browser.find_element(By.ID, "attention").get_attribute("hidden") == "true"


def test_page_glossary_reaches_the_translation_as_the_api_gives_it(browser, server):
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
    browser.find_element(By.CSS_SELECTOR, "#glossary-box summary").click()
    glossary = browser.find_element(By.ID, "glossary")  # "=" typed, a tab pasted
    browser.execute_script("arguments[0].value = 'dogs = kinder spielen\\nbike\\tpark'", glossary)
    box = browser.find_element(By.ID, "source")
    box.clear()
    lines = ["two dogs play in the snow .", "a man rides his bike ."]
    box.send_keys("\n".join(lines))
    browser.find_element(By.ID, "translate").click()
    items = "#results > li > .translation"
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, items)) == 2)
    beam = httpx.get(server + "/info").json()["decoding"]["beam_size"]
    body = {"text": lines, "with_attention": True, "beam_size": beam,
            "glossary": [["dogs", "kinder spielen"], ["bike", "park"]]}  # fmt: skip
    api = httpx.post(server + "/translate", json=body).json()["translations"]
    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, items)]
    assert shown == [" ".join(r["hypotheses"][0]["translation"].split()) for r in api]
    assert "kinder spielen" in shown[0] and "park" in shown[1]
    browser.find_element(By.ID, "glossary").send_keys("\nno separator")
    browser.find_element(By.ID, "translate").click()
    error = wait.until(ec.visibility_of_element_located((By.ID, "error")))
    assert error.text == (
        "422: 'glossary'[2] must be a [source term, target term] pair of non-empty strings"
    )


def test_page_shows_api_errors(browser, server):
    browser.get(server + "/")
    WebDriverWait(browser, 30).until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
    box = browser.find_element(By.ID, "source")
    browser.execute_script("arguments[0].value = 'x'.repeat(2001)", box)
    browser.find_element(By.ID, "translate").click()
    error = WebDriverWait(browser, 30).until(ec.visibility_of_element_located((By.ID, "error")))
    assert error.text == (
        "413: 'text'[0] has 2001 characters; the limit is 2000 (--max-line-chars)"
    )


def test_page_names_an_ensemble_and_translates_with_it(browser, tmp_path):
    """`nmt serve -m A -m A`: the header says what is served, and the page still translates."""
    model = build_tiny_model_dir(tmp_path)
    proc, url = start_server(model, "-m", str(model))
    try:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
        name = "/".join(model.resolve().parts[-2:])
        header = browser.find_element(By.ID, "model").text
        assert header.startswith(f"ensemble of 2 ({name}, {name}) · en → de · transformer")
        box = browser.find_element(By.ID, "source")
        box.clear()
        box.send_keys(SENTENCES[0])
        browser.find_element(By.ID, "translate").click()
        wait.until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results > li > .translation")) == 1
        )
        shown = browser.find_element(By.CSS_SELECTOR, "#results > li > .translation").text
        api = httpx.post(url + "/translate", json={"text": SENTENCES[0]}).json()
        assert shown == api["translations"][0]["hypotheses"][0]["translation"]
    finally:
        stop_server(proc)


def test_page_serves_an_export_without_sampling(browser, tmp_path):
    """`nmt serve -m EXPORT_DIR`: the header names CTranslate2, sampling is switched off, and the
    page translates (with the heatmap of the last layer's head mean)."""
    pytest.importorskip("ctranslate2")
    from nmt.export.ctranslate2 import export_ctranslate2

    export = export_ctranslate2(
        ModelDir(build_tiny_model_dir(tmp_path)), tmp_path / "ct2", quiet=True
    )
    proc, url = start_server(export)
    try:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "ready"))
        assert browser.find_element(By.ID, "model").text.endswith("· cpu · CTranslate2 float32")
        assert browser.find_element(By.ID, "sample").get_attribute("disabled") == "true"
        kinds = Select(browser.find_element(By.ID, "attention-kind")).options
        assert [o.get_attribute("value") for o in kinds if o.is_enabled()] == ["cross"]
        box = browser.find_element(By.ID, "source")
        box.clear()
        box.send_keys(SENTENCES[0])
        browser.find_element(By.ID, "translate").click()
        item = "#results > li > .translation"
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, item)) == 1)
        api = httpx.post(url + "/translate", json={"text": SENTENCES[0]}).json()
        want = api["translations"][0]["hypotheses"][0]["translation"]
        assert browser.find_element(By.CSS_SELECTOR, item).text == " ".join(want.split())
        ink, rows, cols = browser.execute_script(INK)
        assert rows > 0 and cols > 0 and ink > 0
    finally:
        stop_server(proc)
