"""One story per report (issue 28 items 1 and 5): the rendered report.html, report.md (Markdown and Jira) and
analysis.json of real roots (the demo, scenes of tests/scenes.py, a tests/nodegen.py root, a node with no
GPU) are read back as files and checked against each other: the headline, the verdict sentences and what
broke agree; incidents come surest first; no source that covers a span is listed as an empty file; one
driver root; the one remedy for the node first, the others behind a fold; and the ticket text parses in a
real CommonMark/GFM parser (markdown-it-py) and in a strict Jira table-shape check.
"""
from __future__ import annotations

import markupsafe
import json
import re
import shutil
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

import nodegen as N
import scenes
from forensics.bundle import Bundle
from forensics.findings.consistency import contradictions
from forensics.ops.cli import main
from forensics.ops.pipeline import analyze, collect
from reports import render

ROOTS = ("demo", "scene:no-gpu", "scene:app-xid", "node:k3s-v2-nvdp-debian12")


def _build(kind: str, base) -> dict:
    if kind == "demo":
        assert main(["demo", "--out", str(base / "out")]) == 0
        bundle = next(p for p in (base / "out").iterdir() if p.name.startswith("bundle-") and p.is_dir())
        a = analyze(Bundle.open(bundle))
    else:
        what, name = kind.split(":")
        r = scenes.SCENES[name] if what == "scene" else N.BY_ID[name]
        ids, t = (scenes.build if what == "scene" else N.make_root)(base / "root", name if what == "scene" else r)
        s, e = t["window"]
        incidents = [{"start": s.isoformat(), "end": e.isoformat(), "label": "gpu-lost"}] if r.get("incident") else []
        path, _d, _a = collect(base / "root", base / "bundle", argv=["gpu-forensics", "collect"], incidents=incidents)
        shutil.rmtree(base / "root", ignore_errors=True)
        a = analyze(Bundle.open(path))
    render.write(a, base / "report.html", base / "report.md", base / "analysis.json")
    (base / "ticket.jira").write_text(render.markdown(a, "jira"))
    return {"a": json.loads((base / "analysis.json").read_text()), "html": (base / "report.html").read_text(),
            "md": (base / "report.md").read_text(), "jira": (base / "ticket.jira").read_text()}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    done: dict[str, dict] = {}

    def get(kind: str) -> dict:
        if kind not in done:
            done[kind] = _build(kind, tmp_path_factory.mktemp(re.sub(r"\W", "-", kind)))
        return done[kind]
    return get


class _Text(HTMLParser):
    """The text of each element with an id, and of every <td> of the exposure's settings table."""

    def __init__(self):
        super().__init__()
        self.by_id: dict[str, str] = {}
        self.open: list[str | None] = []
        self.details = 0
        self.settings: dict[str, str] = {}
        self._row: list[str] = []
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("p", "div", "details", "section", "h2", "summary"):
            self.open.append(a.get("id"))
            if a.get("id"):
                self.by_id[a["id"]] = ""
        if tag == "tr":
            self._row = []
        if tag == "td":
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("p", "div", "details", "section", "h2", "summary") and self.open:
            self.open.pop()
        if tag == "td" and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        if tag == "tr" and len(self._row) == 2:
            self.settings.setdefault(self._row[0], self._row[1])

    def handle_data(self, data):
        for i in self.open:
            if i:
                self.by_id[i] += data
        if self._cell is not None:
            self._cell += data


def _html(text: str) -> _Text:
    p = _Text()
    p.feed(text)
    return p


@pytest.mark.parametrize("kind", ROOTS)
def test_no_section_contradicts_another(report, kind):
    r = report(kind)
    a, md, page = r["a"], r["md"], _html(r["html"])
    assert contradictions(a) == [] and not [p for p in a["problems"] if p["artifact"] == "analysis"], kind
    h = a["headline"]
    # the headline and the sentences under it, in both reports
    assert f"**{render.md(h['text'])}**" in md and " ".join(page.by_id["headline"].split()) == " ".join(h["text"].split())
    for s in a["verdicts"]:
        assert f"\n- {render.md(s)}\n" in md and str(markupsafe.escape(s)) in r["html"]
    if h.get("cause"):
        title = next(c["title"] for i in a["incidents"] for c in i["causes"] if c["kind"] == h["cause"])
        assert any(s.startswith(f"Incident {h['incident']} (") and f"{title} is {h['verdict'].upper()}" in s
                   for s in a["verdicts"])
    if h["verdict"] in ("undetermined", "none"):
        assert " is CONFIRMED" not in md and " is INFERRED" not in md
    for t in h.get("ruled_out") or []:
        assert f"{t} is EXCLUDED" in md
    # what broke: the same pods and GPUs at the top of both
    b = h.get("broke") or {}
    for name in b.get("pods", []) + b.get("gpus", []):
        assert name in md.split("### Symptoms")[0] and name in page.by_id.get("broke", "")
    # incidents surest first, then by time, in analysis.json and in the order both reports tell them
    rank = ("confirmed", "inferred", "undetermined", "excluded")
    keys = [(min(rank.index(c["verdict"]) for c in i["causes"]), i["window"]["start"]) for i in a["incidents"]]
    assert keys == sorted(keys)
    ids = [i["id"] for i in a["incidents"]]
    assert re.findall(r"^- (I\d+): ", md.split("### Symptoms")[1].split("###")[0], re.M) == ids if ids else True
    assert re.findall(r"<h3>Incident (I\d+)", r["html"]) == ids
    # coverage vs problems: a source that covers a span is never "empty" among the problems
    covering = {g["source"] for g in a["gaps"] if g["covers"]["start"]}
    for p in a["problems"]:
        src = {"packages/dpkg/": "dpkg", "packages/apt/": "apt"}.get(p["artifact"][:13].rstrip("/") + "/")
        assert not (src in covering and p["message"].startswith("empty file")), p
    # one driver root: the settings table, the stack line of report.html and the ticket's Remedies line
    x = a["exposure"]
    if x["assessed"]:
        root = x["driver_root"] or "unknown"
        assert page.settings["driver_root"] == root
        assert (x.get("stack") or {}).get("driver_root") == x["driver_root"]
        stack_line = re.search(r"driver root <b>([^<]*)</b>", r["html"])
        assert stack_line is None or stack_line.group(1) == root
        assert all(m == root for m in re.findall(r"driver root ([^.\s]*)\.\n", md))


def test_the_demo_leads_with_one_remedy_and_folds_the_others(report):
    r = report("demo")
    a, md, page = r["a"], r["md"], _html(r["html"])
    p = a["exposure"]["remedy_plan"]
    assert p["fix"]["what"] == "Have the device plugin pass device specs" and p["fix"]["needs"].startswith("nothing")
    assert [x["what"] for x in p["then"]] == ["Recreate the containers that lost their GPU"]
    assert [x["what"] for x in p["others"]] == ["Enable CDI in containerd's CRI plugin",
                                                "Have the device plugin request devices through CDI (cdi-cri)",
                                                "Switch nvidia-container-runtime to CDI mode"]
    assert all(x["when"].startswith("applies if the node has: ") for x in p["others"])
    assert "Or:" not in md and "Or:" not in r["html"]
    # the top names it with its command first; the alternatives only behind the fold / after "Other remedies"
    first = md.split("### What to do first")[1].split("###")[0]
    assert "**Have the device plugin pass device specs**" in first
    assert re.search(r"```sh\nkubectl -n kube-system set env daemonset/nvidia-device-plugin-daemonset "
                     r"PASS_DEVICE_SPECS=true\nkubectl delete pod -n ml trainer-0\n", first)
    assert "Have the device plugin pass device specs" in page.by_id["first-fix"]
    fold = page.by_id["other-remedies"]
    assert all(x["what"] in fold and x["when"] in fold for x in p["others"])
    outside = r["html"].split('id="other-remedies"')[0]
    assert all(x["what"] not in outside for x in p["others"])
    rest = md.split("Other remedies (instead of the first")[1]
    assert all(f"- **{render.md(x['what'])}**: {render.md(x['when'])}" in rest for x in p["others"])
    # the demo's confirmed incident (I2) comes before the inferred one (I1)
    assert [i["id"] for i in a["incidents"]] == ["I2", "I1"] and a["verdicts"][0].startswith("Incident I2 ")
    assert not [p for p in a["problems"] if p["artifact"].startswith("packages/")]  # dpkg.log empty after rotation
    assert "dpkg.log itself is empty" in next(g["reason"] for g in a["gaps"] if g["source"] == "dpkg")


def test_a_node_without_gpu_blames_neither_the_reload_nor_the_package(report):
    a = report("scene:no-gpu")["a"]
    [inc] = a["incidents"]
    c = {x["kind"]: x for x in inc["causes"]}
    assert c["daemon-reload"]["verdict"] == "excluded" and c["daemon-reload"]["at"]
    assert c["daemon-reload"]["requested_by"]["unit"] == "session-7.scope"
    assert "the node has no NVIDIA GPU" in c["daemon-reload"]["reason"]
    assert c["package-transaction"]["verdict"] == "excluded" and "apt install htop" in c["package-transaction"]["reason"]
    assert c["driver-not-ready"]["verdict"] == "excluded"
    assert a["headline"]["verdict"] == "undetermined" and "package" not in a["headline"]["text"]
    # the person's reload appears among the verdicts, ruled out with its reason
    assert any(s.startswith("Incident I1 (gpu-lost): a systemd daemon-reload is EXCLUDED: PID 1 logged the daemon-reload")
               and "session-7.scope" in s for s in a["verdicts"])
    assert a["exposure"]["driver_root"] is None


def test_a_persons_reload_beside_an_application_fault_is_named_at_the_top(report):
    a = report("scene:app-xid")["a"]
    assert a["headline"]["cause"] == "application-fault" and a["headline"]["ruled_out"] == ["a systemd daemon-reload"]
    [s] = [s for s in a["verdicts"] if " is EXCLUDED" in s]
    assert "a systemd daemon-reload is EXCLUDED" in s and "sudo" in s


# -- the ticket text in real parsers ----------------------------------------------------------------
def _gfm_cells(line: str) -> int:
    """Cells of a GFM table row as the source has them: unescaped pipes between the outer ones."""
    body = re.sub(r"\\.", "", line.strip())
    return body.strip("|").count("|") + 1


@pytest.mark.parametrize("kind", ROOTS)
def test_markdown_ticket_parses_into_whole_tables_and_no_html(report, kind):
    md = report(kind)["md"]
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert not [t for t in tokens if t.type == "html_block"]
    assert not [c for t in tokens if t.type == "inline" for c in t.children or [] if c.type == "html_inline"]
    tables, rows, cells = 0, [], 0
    for t in tokens:
        if t.type == "table_open":
            tables += 1
        elif t.type == "tr_open":
            cells = 0
        elif t.type in ("th_open", "td_open"):
            cells += 1
        elif t.type == "tr_close":
            rows.append(cells)
        elif t.type == "table_close":
            assert len(set(rows)) == 1, rows
            rows = []
    assert tables == md.count("\n|---|")
    for block in re.findall(r"((?:^\|.*\|\n)+)", md, re.M):   # the source's rows hold the header's cell count
        counts = [_gfm_cells(ln) for ln in block.splitlines() if not ln.startswith("|---")]
        assert len(set(counts)) == 1, block[:300]


def _jira_cells(line: str) -> list[str]:
    """A Jira table row's cells, split at ``||`` (header) or ``|``; a backslash escapes the next character.
    Raises AssertionError on an unescaped ``{ } [ ]`` or a ``\\\\`` line break inside a cell."""
    sep = "||" if line.startswith("||") else "|"
    assert line.startswith(sep) and line.endswith(sep), line[-40:]
    body, out, cur, i = line[len(sep):-len(sep)], [], "", 0
    while i < len(body):
        if body[i] == "\\":
            assert i + 1 < len(body) and body[i + 1] not in "\\|", ("a \\\\ or \\| in a cell", line)
            cur, i = cur + body[i:i + 2], i + 2
        elif body.startswith(sep, i):
            out, cur, i = out + [cur], "", i + len(sep)
        else:
            assert body[i] not in "|{}[]", ("unescaped", body[i], line)
            cur, i = cur + body[i], i + 1
    return out + [cur]


@pytest.mark.parametrize("kind", ROOTS)
def test_jira_ticket_tables_keep_their_shape(report, kind):
    j = report(kind)["jira"]
    width, tables = None, 0
    for line in j.splitlines():
        if line.startswith("||"):
            width, tables = len(_jira_cells(line)), tables + 1
        elif line.startswith("|"):
            assert width is not None, line
            assert len(_jira_cells(line)) == width, line[:300]
        else:
            width = None
    assert tables == j.count("\n||Incident||")
    assert "```" not in j and "**" not in j and "\n### " not in j


def test_jira_escapes_what_would_break_a_cell():
    from reports.ticket import jira
    assert jira("a|b\\c{d}[e]") == "a&#124;b&#92;c\\{d\\}\\[e\\]"
    line = "|" + "|".join([jira("x|y"), jira("C:\\"), jira("{code}"), jira("[link|http://x]")]) + "|"
    assert _jira_cells(line) == ["x&#124;y", "C:&#92;", "\\{code\\}", "\\[link&#124;http://x\\]"]
