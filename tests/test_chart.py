"""The timeline picture: an inline SVG that says what the report says, holds nothing external, and
draws hostile evidence text as text.

Glyphs are drawn as paths, so the words are checked in the comments matplotlib writes next to each
text ("<!-- journal rotated before 2026-07-17 -->"), which hold the text exactly as drawn.
"""
from __future__ import annotations

import copy
import re
import time
import xml.etree.ElementTree as ET

import pytest

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextPath

from reports import chart, textwidth
from reports.chart import timeline_svg, write_png


def ev(at, source, kind, summary="", **attrs):
    return {"at": at, "local": at, "source": source, "kind": kind, "summary": summary, "attrs": attrs,
            "evidence": {"artifact": "journal/entries.jsonl", "line": 1}}


@pytest.fixture
def node3():
    """The sample node's story: July outage with the journal rotated and Prometheus retention cut,
    September reload by snapd.service confirmed by its caller line."""
    return {
        "schema": "gpu-forensics/analysis/v1", "node": "node3-gpu", "collected_at": "2026-10-20T00:00:00Z",
        "timezone": {"name": "Asia/Seoul", "utc_offset": "+0900"},
        "incidents": [
            {"id": "I1", "label": "july", "symptom": "NVML: Unknown Error",
             "window": {"start": "2026-07-11T03:34:00Z", "end": "2026-08-01T15:00:00Z"},
             "causes": [{"kind": "daemon-reload", "verdict": "inferred", "at": "2026-07-11T03:33:58Z",
                         "requested_by": {"unit": "apt-daily-upgrade.service", "basis": "inferred"}}]},
            {"id": "I2", "label": None, "symptom": "Failed to initialize NVML: Unknown Error",
             "window": {"start": "2026-09-02T04:04:58Z", "end": "2026-09-02T04:05:27Z"},
             "causes": [{"kind": "daemon-reload", "verdict": "confirmed", "at": "2026-09-02T04:05:13.211000Z",
                         "requested_by": {"unit": "snapd.service", "pid": 48211, "comm": "systemctl",
                                          "basis": "caller-line"}}]},
        ],
        "gaps": [
            {"source": "journal", "covers": {"start": "2026-07-16T15:00:05Z", "end": "2026-10-20T00:00:00Z"},
             "reason": "journal holds entries from 2026-07-16T15:00:05Z only"},
            {"source": "prometheus", "covers": {"start": "2026-08-01T15:00:00Z", "end": "2026-10-20T00:00:00Z"},
             "reason": "Prometheus holds data from 2026-08-01T15:00:00Z only"},
            {"source": "unattended-upgrades", "covers": {"start": None, "end": None},
             "reason": "absent: /var/log/unattended-upgrades not found on the node"},
            {"source": "boot", "covers": {"start": "2025-12-25T00:12:44Z", "end": "2026-10-20T00:00:00Z"},
             "reason": "the running boot started 2025-12-25"},
        ],
        "timeline": [
            ev("2026-06-11T01:00:00Z", "dpkg", "package.dpkg-action", action="upgrade", package="libc6"),
            ev("2026-06-11T01:00:00Z", "apt", "package.transaction", command="apt-get upgrade"),
            ev("2026-07-11T03:34:00Z", "prometheus", "metrics.dcgm-last-seen", gpu="0"),
            ev("2026-07-16T15:00:05Z", "journal", "journal.boot"),
            ev("2026-08-01T15:00:00Z", "prometheus", "metrics.capacity-change", old=8, new=0),
            ev("2026-09-01T00:00:00Z", "containerd", "container.created", id="abc"),
            ev("2026-09-02T04:05:13.211000Z", "journal", "journal.reload", "daemon-reload by snapd.service",
               requester_pid=48211, requester_comm="systemctl", requester_unit="snapd.service"),
            ev("2026-09-02T04:05:27Z", "journal", "journal.nvml-error", "Failed to initialize NVML"),
            ev("2026-09-02T04:05:30Z", "probe", "container.probe", result="EPERM"),
            ev("2026-09-02T04:04:58Z", "incident", "incident.start", incident="I2"),
        ],
    }


def words(svg: str) -> str:
    """The text drawn, from matplotlib's comments, one per line."""
    return "\n".join(re.findall(r"<!-- (.*?) -->", svg))


def test_lanes_gaps_reloads_and_zoom_panels(node3):
    svg = timeline_svg(node3)
    w = words(svg)
    for lane in ("journal", "packages", "containers", "DCGM", "GPU capacity"):
        assert lane in w.splitlines()
    assert "journal rotated before 2026-07-17" in w  # 15:00:05Z is midnight the 17th in Seoul
    assert "Prometheus retention starts 2026-08-02" in w
    assert "unattended-upgrades: absent" in w
    assert "<pattern" in svg  # hatched, not colour alone
    assert "snapd.service" in w and "apt-daily-upgrade.service (inferred)" in w
    assert "snapd.service 13:05:13" in w  # zoomed: the requester with the node-local second
    assert "node time, KST / UTC+09:00" in w
    assert "Incident I1 \u201cjuly\u201d window, zoomed: 2026-07-11 12:34:00 .. 2026-08-02 00:00:00" in w
    assert "Incident I2 window, zoomed: 2026-09-02 13:04:58 .. 2026-09-02 13:05:27" in w
    assert "first known bad" in w and "last known good" in w


def test_inline_and_self_contained(node3):
    svg = timeline_svg(node3, element_id="timeline-chart")
    assert svg.startswith('<svg id="timeline-chart" ') and "<?xml" not in svg and "<!DOCTYPE" not in svg
    assert "<metadata" not in svg and "<script" not in svg.lower() and "<image" not in svg
    assert re.findall(r'href="(?!#)', svg) == [] and re.findall(r"url\((?!#)", svg) == []
    assert "http://" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    root = ET.fromstring(svg)  # well-formed
    assert root.get("viewBox") and root.get("width") == "100%"
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert len(ids) == len(set(ids)) and all(i.startswith("timeline-chart") for i in ids)
    assert "#timeline-chart *{stroke-linejoin" in svg  # matplotlib's global style scoped to the picture
    assert timeline_svg(node3) == svg  # deterministic: the same bundle gives the same report


def test_evidence_text_is_escaped_and_not_math(node3):
    a = copy.deepcopy(node3)
    a["incidents"][1]["causes"][0]["requested_by"] = None
    a["timeline"][6]["attrs"]["requester_unit"] = '<script>alert(1)</script> & $x^2$ "q"\x1b'
    svg = timeline_svg(a)
    ET.fromstring(svg)
    assert "<script" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; $x^2$" in svg
    assert 'id="timeline-chart-DejaVuSans-24"' in svg  # a "$" glyph was drawn: no mathtext


@pytest.mark.parametrize("a", [
    {},
    {"timezone": {"name": None, "utc_offset": None}, "incidents": [], "gaps": [], "timeline": []},
    {"timezone": {"utc_offset": "-0530"}, "timeline": [ev("2026-09-02T04:05:13Z", "journal", "journal.reload")]},
    {"timeline": [ev("not a time", "journal", "journal.reload"), ev(None, "dpkg", "package.dpkg-action")]},
    {"incidents": [{"id": "I1", "window": {"start": "2026-09-02T04:05:00Z", "end": "2026-09-02T04:05:00Z"},
                    "causes": []}], "gaps": [{"source": "journal", "covers": {"start": None, "end": None},
                                              "reason": "absent"}]},
], ids=["bare", "empty", "one-event", "bad-times", "zero-length-window"])
def test_never_crashes_on_thin_evidence(a):
    svg = timeline_svg(a)
    assert ET.fromstring(svg).tag.endswith("svg")


def test_single_event_shows_in_node_time():
    svg = timeline_svg({"timezone": {"name": "Asia/Kolkata", "utc_offset": "+0530"},
                        "timeline": [ev("2026-09-02T04:05:13Z", "journal", "journal.reload",
                                        requester_comm="systemctl")]})
    w = words(svg)
    assert "systemctl" in w and "node time, IST / UTC+05:30" in w


def test_many_events_stay_small_and_fast(node3):
    a = copy.deepcopy(node3)
    a["timeline"] += [ev(f"2026-0{m}-{d:02d}T{h:02d}:{s:02d}:00Z", "dpkg", "package.dpkg-action")
                      for m in range(1, 9) for d in range(1, 29) for h in range(24) for s in range(0, 60, 10)]
    t0 = time.monotonic()
    svg = timeline_svg(a)
    assert time.monotonic() - t0 < 20 and len(svg) < 3_000_000
    assert len(a["timeline"]) > 30000


def test_write_png(node3, tmp_path):
    p = write_png(node3, tmp_path / "t.png")
    head = p.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(head[16:20], "big") >= 900


@pytest.mark.parametrize("text", ["apt-daily-upgrade.service, snapd.se\u2026 \u00d717", "session-12.scope 21:31:11",
                                  "<script>alert(1)</script>", "S x S", "j", "f", "\u01c4", "   a  ", "\u6f22\u5b57 \u00e9",
                                  "e\u0301", "requester unknown (inferred)", "\u2026"])
def test_label_width_is_the_ink_extent_matplotlib_computes(text):
    path = TextPath((0, 0), text, size=chart.SMALL, prop=FontProperties(family="DejaVu Sans"))
    assert textwidth.ink_width(path) == pytest.approx(path.get_extents().width, abs=1e-9)


def test_timeline_out_of_time_order_draws_the_same_words(node3):
    shuffled = copy.deepcopy(node3)
    shuffled["timeline"].reverse()
    assert words(timeline_svg(shuffled)) == words(timeline_svg(node3))


def test_kubernetes_events_get_their_own_lane_only_when_there_are_some(node3):
    assert "Kubernetes" not in words(timeline_svg(node3)).splitlines()
    a = copy.deepcopy(node3)
    a["timeline"] += [ev("2026-09-02T04:05:20Z", "kube", "kube.event", type="Warning", reason="UnexpectedAdmissionError"),
                      ev("2026-09-02T04:05:25Z", "kube", "kube.container-terminated", reason="Error", exit_code=1),
                      ev("2026-09-02T04:06:00Z", "kube", "kube.node-condition", type="Ready", status="False")]
    w = words(timeline_svg(a))
    assert "Kubernetes" in w.splitlines()
    assert "Kubernetes event" in w and "container terminated" in w and "node condition change" in w  # the legend
    for lane in ("journal", "packages", "containers", "DCGM", "GPU capacity"):
        assert lane in w.splitlines()


def test_reload_labels_are_level_rows_with_little_room_above_the_lanes(node3):
    """Issue 16: slanted labels left 40 % of the overview empty above the lanes; level labels in rows
    take what they need, and no two labels of a panel overlap."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = chart._figure(node3)
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    lo, top = ax.get_ylim()
    lanes = len(ax.get_yticks())
    assert (top - (lanes - 0.5)) / (top - lo) < 0.25, (lo, top, lanes)
    texts = [t for t in ax.texts if t.get_color() == "#7a0016"]
    assert {"snapd.service", "apt-daily-upgrade.service (inferred)"} <= {t.get_text() for t in texts}
    assert all(t.get_rotation() == 0 for t in texts)
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert all(b.y1 <= ax.get_window_extent(r).y1 for b in boxes)  # inside the panel, under its title


def _reload_positions(svg: str) -> tuple[list[float], list[tuple[str, float, float]]]:
    """From the picture's SVG (user units = points): the x of every reload marker of the first panel,
    and each of its reload labels as ``(text, left, right)``: the glyph group's translate x, plus the
    drawn text's width (the same font and size as chart.SMALL)."""
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    groups = {g.get("id"): g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("id")}
    marks = [g for i, g in groups.items() if "reload-markers-" in i]
    labels = [g for i, g in groups.items() if "reload-label-" in i]
    first = min(float(u.get("y")) for g in marks for u in g.iter("{http://www.w3.org/2000/svg}use"))
    xs = sorted(float(u.get("x")) for g in marks for u in g.iter("{http://www.w3.org/2000/svg}use")
                if abs(float(u.get("y")) - first) < 1)  # the overview is the top panel
    words_at = re.findall(r'id="[^"]*reload-label-\d+">\s*<!-- (.*?) -->', svg)
    out = []
    for text, g in zip(words_at, labels):
        inner = g.find("s:g", ns)
        m = re.match(r"translate\(([-\d.]+) ([-\d.]+)\)", inner.get("transform"))
        if abs(float(m.group(2)) - first) > 80:
            continue  # a zoomed panel's label
        w = TextPath((0, 0), text, size=chart.SMALL, prop=FontProperties(family="DejaVu Sans")).get_extents().width
        out.append((text, float(m.group(1)), float(m.group(1)) + w))
    return xs, out


def test_each_reload_label_is_drawn_at_its_own_reload_and_over_no_other(node3):
    """Issue 28: the overview's labels pointed at the wrong reloads (a session-41.scope label drawn over
    another incident's reload). The demo's scene, two reloads six weeks apart on a 15-month axis: each
    label starts or ends at its own marker (read from the SVG), in time order, and no label spans the
    other reload's marker; with a third (inferred) reload close by, each label still starts or ends at
    its own marker."""
    a = copy.deepcopy(node3)
    a["collected_at"] = "2026-12-02T16:00:00Z"
    a["timeline"].append(ev("2026-10-14T01:22:03.602000Z", "journal", "journal.reload",
                            "daemon-reload by session-41.scope", requester_pid=77104, requester_comm="systemctl",
                            requester_unit="session-41.scope"))
    a["timeline"].append(ev("2025-08-21T01:02:09Z", "apt", "package.transaction", command="apt-get install"))
    two = copy.deepcopy(a)
    del two["incidents"][0]["causes"][0]["requested_by"]  # no inferred reload: the demo's two reloads
    for scene, width in ((two, chart.WIDTH_IN), (two, chart.PHONE_WIDTH_IN), (a, chart.WIDTH_IN)):
        xs, labels = _reload_positions(timeline_svg(scene, width_in=width))
        assert len(xs) == (2 if scene is two else 3) and labels
        for text, left, right in labels:
            own = [x for x in xs if abs(x - left) < 3 or abs(x - right) < 3]
            assert own, (text, left, right, xs)  # starts or ends at a reload marker
            if scene is two and not re.search(r"\d reloads$|\u00d7\d+$", text):  # a cluster's label names several
                assert not any(left + 1 < x < right - 1 for x in xs if x not in own), (text, left, right, xs)
        if width == chart.WIDTH_IN:  # wide: each reload its own label, in time order
            anchors = [lf if any(abs(x - lf) < 3 for x in xs) else rt for _, lf, rt in labels]
            assert anchors == sorted(anchors) and len(labels) == len(xs)
            assert [t for t, *_ in labels][-2:] == ["snapd.service", "session-41.scope"]


def test_the_phone_picture_is_narrow_and_names_the_same_incidents(node3):
    """The phone's picture (issue 28 item 2): PHONE_WIDTH_IN wide, its own ids, every incident zoomed,
    and no title wider than the figure (matplotlib would draw it past the edge)."""
    svg = timeline_svg(node3, element_id="timeline-chart-phone", width_in=chart.PHONE_WIDTH_IN)
    root = ET.fromstring(svg)
    vb = [float(v) for v in root.get("viewBox").split()]
    assert vb[2] == pytest.approx(chart.PHONE_WIDTH_IN * 72, abs=1)
    assert svg.startswith('<svg id="timeline-chart-phone" ')
    w = words(svg).splitlines()
    assert any(x.startswith("I1 zoomed: ") for x in w) and any(x.startswith("I2 zoomed: ") for x in w)
    for t in (x for x in w if "zoomed" in x or x.startswith("All evidence")):
        width = TextPath((0, 0), t, size=chart.FONT + 1, prop=FontProperties(family="DejaVu Sans")).get_extents().width
        assert width < vb[2] - 20, t
    both = chart.figures(node3)
    assert both.count("<svg ") == 2 and 'id="timeline-chart"' in both and 'id="timeline-chart-phone"' in both



def test_markers_closer_than_a_column_are_drawn_once_and_apart_when_the_panel_is_narrow_enough():
    """Markers of one kind and lane within 1/COLUMNS of a panel's width (~0.4 pt, under a CSS pixel) are
    drawn once, the first of them: ten dpkg actions a second apart are one marker on a panel of four
    months and ten on a panel of a minute; another lane's marker at the same time is drawn too."""
    from datetime import datetime, timedelta, timezone

    from matplotlib.figure import Figure

    from reports.styles import STYLES
    look = STYLES["package.dpkg-action"][1]
    t0 = datetime(2026, 9, 2, 4, 5, tzinfo=timezone.utc)
    pts = [(t0 + timedelta(seconds=s), 1) for s in range(10)] + [(t0, 2)]
    for lo, hi, want in ((t0 - timedelta(days=60), t0 + timedelta(days=60), 2),
                         (t0 - timedelta(seconds=20), t0 + timedelta(seconds=40), 11)):
        ax = Figure().add_subplot()
        chart._markers(ax, pts, look, lo, hi)
        xs, ys = ax.lines[-1].get_data()
        assert len(xs) == want and sorted(ys) == ([1] * (want - 1) + [2])


@pytest.mark.parametrize("far", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "0001-01-01T00:30:00+01:00"])
def test_a_time_at_the_ends_of_the_calendar_is_left_out_not_a_crash(far):
    """A line dated 9999-12-31 (or year 1) reached the picture's margins (``lo - pad``) and raised
    OverflowError while drawing; such a time is left out, like one that does not parse, and the rest is drawn.
    matplotlib's date locator warning for a span it has no interval for is not passed on (it reached the
    terminal when the picture was drawn in-process)."""
    import re
    import warnings
    a = {"node": "n", "collected_at": "2026-09-02T05:00:00Z", "timezone": {"name": "UTC", "utc_offset": "+14:00"},
         "incidents": [{"id": "I1", "window": {"start": "2026-09-02T04:04:58Z", "end": far}}],
         "gaps": [{"source": "journal", "covers": {"start": far, "end": "2026-09-02T04:05:13Z"}, "reason": "x"}],
         "timeline": [{"at": "2026-09-02T04:05:13Z", "kind": "journal.reload", "attrs": {}},
                      {"at": far, "kind": "journal.reload", "attrs": {}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svg = timeline_svg(a)
    assert re.findall(r"<!-- (n: all evidence, [^>]*) -->", svg) == ["n: all evidence, 2026-09-02 .. 2026-09-02"]
