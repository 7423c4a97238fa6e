"""report.html in a real browser: Debian's chromium, headless, over the DevTools protocol.

Opens the report from file:// and checks what a reviewer who gets it attached to a ticket relies on:
nothing leaves the page, nothing errors, the timeline picture is there with a real size (on a desktop,
a phone and an A4 print), and a journal line with HTML in it is shown as text and runs nothing.
Screenshots (desktop, A4 print, phone) and a PDF are kept under $GPU_FORENSICS_ARTIFACTS
(default: test-artifacts/).

chromium comes from scripts/browser-deps.sh; when it is missing these tests fail, they do not skip.
"""
from __future__ import annotations

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


def chart_box(page) -> dict:
    box = page.evaluate("""(() => { const r = document.querySelector('#timeline-chart').getBoundingClientRect();
        return {tag: document.querySelector('#timeline-chart').tagName.toLowerCase(), width: r.width,
                height: r.height, right: r.right, viewport: document.documentElement.clientWidth}; })()""")
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
    assert chart_box(page)["right"] <= 390 + 1  # scales down with the page instead of overflowing
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
    text = page.evaluate("document.body.innerText")
    assert text.count('<script>window.__pwned=1</script>') >= 2  # the incident's symptom and the timeline row
    assert '<img src=x onerror="window.__pwned=2">' in text
    page.screenshot(artifacts / "report-hostile-desktop-1280.png", 1280)
    page.close()
