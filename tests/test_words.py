"""Words a person writes (issue 28 item 3): counts in the right number, times to the second with their
zone, text cut between words with its error clause kept, and the timeline table and ticket text built
from them, read from the sample node's real bundle."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from forensics.excerpt import cut, excerpt
from forensics.timeutil import to_second
from forensics.words import count_of, plural
from reports import render, ticket, timeline

PROJECT = Path(__file__).resolve().parent.parent
PROBE = ('"Probe failed" probeType="Readiness" pod="ml/trainer-0" podUID="3f9d2a1c-5b7e-4c8d-9e0f-1a2b3c4d5e6f" '
         'containerName="trainer" probeResult="failure" output="Failed to initialize NVML: Unknown Error\\n"')


def test_counts_take_the_right_number():
    assert [count_of(n, "problem") for n in (0, 1, 2)] == ["0 problems", "1 problem", "2 problems"]
    assert count_of(1, "node") == "1 node" and count_of(3, "more cause") == "3 more causes"
    assert [plural(w) for w in ("entry", "story", "process", "day", "GPU rule")] == \
        ["entries", "stories", "processes", "days", "GPU rules"]


def test_times_to_the_second_with_their_zone():
    assert to_second("2026-09-02T13:05:13.211000+09:00") == "2026-09-02 13:05:13 +09:00"
    assert to_second("2026-12-02T16:39:24.834062Z") == "2026-12-02 16:39:24 UTC"
    assert to_second("2026-07-11T12:34:00-05:30") == "2026-07-11 12:34:00 -05:30"
    assert to_second(None) == "" and to_second("unknown") == "unknown"


def test_the_nvml_line_keeps_its_error_clause_and_is_cut_between_words():
    s = excerpt(PROBE, 160)
    assert len(s) <= 160 + 2 and s.endswith('output="Failed to initialize NVML: Unknown Error\\n"')
    assert s.startswith('"Probe failed" probeType="Readiness"') and " … " in s
    assert cut("apt-get install -y openssh-server:amd64 curl", 36) == "apt-get install -y…"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcdefgh:-.", min_size=1, max_size=12), min_size=1, max_size=30),
       st.integers(min_value=8, max_value=120))
def test_a_cut_never_splits_a_word(words, limit):
    text = " ".join(words)
    out = cut(text, limit)
    assert len(out) <= limit
    if out != text:
        kept = out[:-1].split(" ")
        whole = [w for w in kept[:-1]] + ([kept[-1]] if len(out) - 1 >= limit // 3 else [])
        # every word shown is a word of the text, whole (one over-long first word is the exception)
        assert all(w in words for w in whole if w) or len(words[0]) >= limit // 3


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    r = subprocess.run([sys.executable, "-m", "forensics.ops.cli", "demo", "--out", str(out)], cwd=PROJECT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, json.loads((out / "analysis.json").read_text(encoding="utf-8"))


_USEC = re.compile(r"\d\d:\d\d:\d\d\.\d+")


def test_the_timeline_table_reads_to_the_second_and_keeps_the_nvml_clause(demo):
    _, a = demo
    buf = io.StringIO()
    timeline.table(a, buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) == len(a["timeline"]) and not _USEC.search(buf.getvalue())
    nvml = [ln for ln in lines if "journal.nvml-error" in ln]
    assert nvml and all(ln.endswith('output="Failed to initialize NVML: Unknown Error\\n"') for ln in nvml)
    assert lines[0][:26].rstrip() == to_second(a["timeline"][0]["local"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d", lines[0][:26].rstrip())


def test_the_reports_hold_no_python_words_nor_cut_words(demo):
    """The HTML report (text of the tags) and the Markdown ticket: no microseconds, no "1 problems",
    no "nothing .. nothing"; the NVML symptom whole in the HTML, its full line one click away."""
    out, a = demo
    html = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    text = re.sub(r"<svg.*?</svg>", "", html, flags=re.S)
    for t in (text, md):
        assert not _USEC.search(t), _USEC.search(t)
        assert not re.search(r"\b1 (problems|nodes|causes|lines|holes|events)\b", t)
        assert "nothing .. nothing" not in t and "nothing</td>" not in t
    assert 'output="Fail<' not in text and 'output=&#34;Fail<' not in text
    assert text.count("<details class=\"more\"><summary>NVML/CUDA error logged by kubelet.service") == 2
    assert "Kernel log read: none." in text and "Not read: kernel, kern.log, kmsg" in text
    assert (f"{len(a['problems'])} problem" in text) if a["problems"] else "met while reading the bundle" not in text
    assert ticket.render(a, render.MD_LIMIT).count("no data") >= 3  # the kernel, kern.log, kmsg gaps
