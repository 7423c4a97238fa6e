"""report.html in a real browser: Debian's chromium, headless, over the DevTools protocol.

Opens the report from file:// and checks what a reviewer who gets it attached to a ticket relies on:
nothing leaves the page, nothing errors, the timeline picture is there with a real size (on a desktop,
a phone and an A4 print), and a journal line with HTML in it is shown as text and runs nothing.
Screenshots (desktop, A4 print, phone) and a PDF are kept under $GPU_FORENSICS_ARTIFACTS
(default: test-artifacts/).

chromium comes from scripts/browser-deps.sh; when it is missing these tests fail, they do not skip.
"""
from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from browser import Browser
from reports import render

PROJECT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("GPU_FORENSICS_ARTIFACTS", PROJECT / "test-artifacts"))
HOSTILE = 'NVML: <script>window.__pwned=1</script> <img src=x onerror="window.__pwned=2"> & $x$'
A4_PX = 794  # 210 mm at 96 CSS px per inch


@pytest.fixture(scope="module")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()
    assert b.proc.poll() is not None and not b._strays(), "chromium outlived the test"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """`gpu-forensics demo`: the sample node collected and analysed exactly as a live node would be."""
    out = tmp_path_factory.mktemp("demo")
    r = subprocess.run([sys.executable, "-m", "forensics.ops.cli", "demo", "--out", str(out)], cwd=PROJECT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and (out / "report.html").is_file(), r.stdout + r.stderr
    return out


def check_page(page, url: str) -> dict:
    """What every report must satisfy; returns the picture's box at the current width."""
    leaving = [u for u in page.requests() if u != url and not u.startswith("data:")]
    assert leaving == [], f"requests left the page: {leaving}"
    assert page.console_errors() == []
    assert page.evaluate("document.querySelectorAll('#timeline-chart').length") == 1
    return chart_box(page)


def chart_box(page, chart: str = "#timeline-chart") -> dict:
    """The box of the picture ``chart`` (the desktop's, or ``#timeline-chart-phone``) at the current width."""
    box = page.evaluate(f"""(() => {{ const e = document.querySelector('{chart}'), r = e.getBoundingClientRect();
        return {{tag: e.tagName.toLowerCase(), width: r.width,
                height: r.height, right: r.right, viewport: document.documentElement.clientWidth}}; }})()""")
    assert box["tag"] == "svg" and box["width"] > 0 and box["height"] > 0, box
    return box


def test_demo_report_in_chromium(browser, demo, artifacts):
    a = json.loads((demo / "analysis.json").read_text(encoding="utf-8"))
    html = (demo / "report.html").read_text(encoding="utf-8")
    report = artifacts / "report.html"
    report.write_text(html, encoding="utf-8")
    page = browser.page()
    page.open(report.as_uri())
    box = check_page(page, report.as_uri())
    assert box["width"] >= 600, box  # drawn at its own ~1000 px, not squeezed, on a desktop
    text = " ".join(page.evaluate("document.body.innerText").split())
    for sentence in a["verdicts"]:
        assert " ".join(sentence.split()) in text
    page.screenshot(artifacts / "report-desktop-1280.png", 1280)
    page.screenshot(artifacts / "report-phone-390.png", 390, mobile=True)
    # issue 28: on a phone the phone's picture fits the screen (no sideways scroll), the desktop's is hidden
    box = chart_box(page, "#timeline-chart-phone")
    assert page.evaluate("document.querySelector('figure.chart').getBoundingClientRect().right") <= 390 + 1
    assert box["right"] <= 390 and box["width"] >= 300, box
    assert page.evaluate("document.querySelector('#timeline-chart').getBoundingClientRect().width") == 0
    page.screenshot(artifacts / "report-print-a4.png", A4_PX, media="print")
    box = chart_box(page)
    assert box["right"] <= A4_PX + 1 and box["width"] >= A4_PX * 0.6, box  # fits the paper, still large
    assert page.evaluate("matchMedia('print').matches") is True
    pdf = page.pdf(artifacts / "report.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert page.console_errors() == []
    page.close()


def test_hostile_journal_message_is_shown_as_text_and_runs_nothing(browser, demo, artifacts):
    a = copy.deepcopy(json.loads((demo / "analysis.json").read_text(encoding="utf-8")))
    inc = a["incidents"][-1]
    inc["symptom"] = HOSTILE
    a["timeline"].append({"at": inc["window"]["end"], "local": inc["window"]["end_local"], "source": "journal",
                          "kind": "journal.nvml-error", "summary": HOSTILE, "attrs": {"message": HOSTILE},
                          "evidence": {"artifact": "journal/entries.jsonl", "line": 99}, "original": HOSTILE,
                          "flags": []})
    for e in a["timeline"]:
        if e["kind"] == "journal.reload":  # the picture draws the requester: hostile there too
            e["attrs"]["requester_unit"] = HOSTILE
    html = render.html(a)
    assert "<script>window.__pwned" not in html and "<img src=x" not in html
    report = artifacts / "report-hostile.html"
    report.write_text(html, encoding="utf-8")
    page = browser.page()
    page.open(report.as_uri())
    check_page(page, report.as_uri())
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img[src=\"x\"], script').length") == 0
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")  # the timeline table is folded
    text = page.evaluate("document.body.innerText")
    assert text.count('<script>window.__pwned=1</script>') >= 2  # the incident's symptom and the timeline row
    assert '<img src=x onerror="window.__pwned=2">' in text
    page.screenshot(artifacts / "report-hostile-desktop-1280.png", 1280)
    page.close()


def clip(page, path: Path, selector: str) -> Path:
    """A PNG of the element ``selector`` at the current emulated width."""
    r = page.evaluate(f"""(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();
        return {{x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}}; }})()""")
    shot = page.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                "clip": {**r, "height": min(r["height"], 8000), "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def test_report_on_a_390px_phone(browser, demo, artifacts):
    """Issue 16: on a 390 px phone the verdict and the exposure table (its "Why" column too) are inside the
    screen, as cards; the chart's smallest text is at least 9 px; nothing makes the page scroll sideways.
    Screenshots of the top and of the exposure section are kept."""
    from reports import chart
    a = json.loads((demo / "analysis.json").read_text(encoding="utf-8"))
    report = artifacts / "report.html"
    report.write_text((demo / "report.html").read_text(encoding="utf-8"), encoding="utf-8")
    page = browser.page()
    page.open(report.as_uri())
    page.screenshot(artifacts / "report-phone-390.png", 390, mobile=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    head = page.evaluate("""(() => { const e = document.querySelector('#headline'), r = e.getBoundingClientRect();
        return {left: r.left, right: r.right, text: e.innerText, px: parseFloat(getComputedStyle(e).fontSize)}; })()""")
    assert head["text"] == a["headline"]["text"] and head["left"] >= 0 and head["right"] <= 390 and head["px"] >= 14
    why = page.evaluate("""[...document.querySelectorAll('#exposure-section table.cards td[data-label="Why"]')].map(td => {
        const r = td.getBoundingClientRect(); return {left: r.left, right: r.right, text: td.innerText}; })""")
    assert [w["text"] for w in why] == [c["reason"] for c in a["exposure"]["containers"]]
    assert why and all(w["left"] >= 0 and w["right"] <= 390 for w in why), why
    assert page.evaluate("getComputedStyle(document.querySelector('table.cards td')).display") == "block"
    scale = page.evaluate("""(() => { const s = document.querySelector('#timeline-chart-phone');
        return s.getBoundingClientRect().width / s.viewBox.baseVal.width; })()""")
    assert chart.SMALL * scale >= 9, scale  # svg user units are points; 10.5 pt text drawn at >= 9 CSS px
    clip(page, artifacts / "report-phone-390-top.png", "#verdicts-section")
    clip(page, artifacts / "report-phone-390-exposure.png", "#exposure-section")
    page.close()


def test_report_tables_read_right_on_a_desktop(browser, demo, artifacts):
    """Issue 16: time cells never wrap inside a timestamp; the manifest is folded, its counts first; no
    Python literal in a table cell; no heading holds a raw log line."""
    a = json.loads((demo / "analysis.json").read_text(encoding="utf-8"))
    report = artifacts / "report.html"
    report.write_text((demo / "report.html").read_text(encoding="utf-8"), encoding="utf-8")
    page = browser.page()
    page.open(report.as_uri())
    page.screenshot(artifacts / "report-desktop-1280.png", 1280)
    page.evaluate("document.querySelector('#timeline-table').open = true")  # folded (issue 28): open it
    lines = page.evaluate("""[...document.querySelectorAll('td.t')].filter(td => !td.querySelector('br')).map(td => {
        const r = document.createRange(); r.selectNodeContents(td);
        return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; })""")
    assert len(lines) >= len(a["timeline"]) and set(lines) == {1}
    counts = {}
    for r in a["bundle"]["artifacts"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = page.evaluate("document.querySelector('#manifest-counts').innerText")
    assert summary == (f"{len(a['bundle']['artifacts'])} artifacts: "
                       + ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) + ".")
    assert page.evaluate("document.querySelector('#manifest-table').open") is False
    assert page.evaluate("document.querySelector('#manifest-table').getBoundingClientRect().height") < 60
    assert page.evaluate("document.querySelector('#manifest-table table').checkVisibility()") is False
    cells = page.evaluate("[...document.querySelectorAll('td')].map(td => td.innerText.trim())")
    assert not {"True", "False", "None"} & set(cells)
    assert "no" in cells and "yes" in cells  # systemd_cgroup yes, enable_cdi no in the node settings
    heads = page.evaluate("[...document.querySelectorAll('h1,h2,h3')].map(h => h.innerText)")
    assert not any("\\n" in h or "Probe failed" in h for h in heads), heads
    assert "Incident I2" in heads and page.evaluate("document.body.innerText").count("(legacy)") == 0
    page.close()


#: the demo's page height bounds, CSS px: at 390 px (a phone) it was 37,933 px with every table as cards
#: and the cause tables open (24,590 px without the mobile viewport, issue 28); with the cause tables'
#: ruled-out rows, the timeline table, the suggested rules and the alert table folded it is about 14,200,
#: most of it the verdicts and the five remedies (another part of issue 28 folds those). 1280 px: 8,800.
PHONE_MAX_PX, DESKTOP_MAX_PX = 15000, 10000
WIDE = """[...document.querySelectorAll('table, svg, img, pre')].filter(e => e.checkVisibility())
    .map(e => ({tag: e.tagName, id: e.id || e.className.baseVal || e.className || '',
                head: e.rows ? e.rows[0].innerText.slice(0, 60) : '',
                left: e.getBoundingClientRect().left, right: e.getBoundingClientRect().right}))
    .filter(b => b.right > innerWidth + 0.5 || b.left < -0.5)"""


@pytest.mark.parametrize("width", [390, 1280])
def test_report_fits_a_phone_and_a_desktop(browser, demo, tmp_path, width):
    """Issue 28 item 2, measured from the DOM in chromium: nothing scrolls sideways (the document's
    scrollWidth is the viewport's), every visible table, picture and code block lies inside the
    viewport, also with every fold opened, and the page stays under its bound. Screenshots go to
    tmp_path and their paths are printed."""
    report = tmp_path / "report.html"
    report.write_text((demo / "report.html").read_text(encoding="utf-8"), encoding="utf-8")
    page = browser.page()
    page.open(report.as_uri())
    shot = page.screenshot(tmp_path / f"report-{width}.png", width, mobile=width < 600)
    print(f"screenshot: {shot}")
    inner = page.evaluate("innerWidth")
    assert inner == width
    assert page.evaluate("document.documentElement.scrollWidth") <= inner
    assert page.evaluate(WIDE) == []
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"page height at {width} px: {height} px")
    assert height <= (PHONE_MAX_PX if width < 600 else DESKTOP_MAX_PX), height
    shown = page.evaluate("[...document.querySelectorAll('svg[role=img]')].filter(e => e.checkVisibility())"
                          ".map(e => e.id)")
    assert shown == (["timeline-chart-phone"] if width < 600 else ["timeline-chart"])
    folds = page.evaluate("[...document.querySelectorAll('details')].map(d => (d.open = true, d.id || d.className))")
    assert {"timeline-table", "causes-ruled-out", "manifest-table"} <= set(folds), folds
    assert page.evaluate("document.documentElement.scrollWidth") <= inner
    assert page.evaluate(WIDE) == []
    if width < 600:  # every table of more than two columns is cards: one column, inside the screen
        cards = page.evaluate("[...document.querySelectorAll('table')].filter(t => t.checkVisibility()"
                              " && t.rows[0].cells.length > 2).map(t => t.classList.contains('cards'))")
        assert len(cards) >= 8 and all(cards), cards
    opened = page.screenshot(tmp_path / f"report-{width}-opened.png", width, mobile=width < 600)
    print(f"screenshot (every fold open): {opened}")
    page.close()
