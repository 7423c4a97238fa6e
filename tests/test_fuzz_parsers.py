"""Fuzzing what parses (issue 27 C): arbitrary text and bytes, and text near each grammar, never raise out
of a parser except its documented error; where a round trip exists, it holds. Parsers covered here are
those tests/test_properties.py does not take arbitrary input to: the journal's stored entries and
journalctl's JSON lines, kmsg records and kern.log lines with their Xid, OOM and AER classification,
package-log lines as raw text, CRI pod-log lines, the time parsers, OCI state/config readers on raw
bytes, runc's log and systemctl's output, and Prometheus answers and exposition text.

Each crash hypothesis found is fixed in the parser and kept here as an ``@example``.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from collectors.containers import parse as cp
from collectors.journal import journalctl
from collectors.kernlog import ring, syslog
from collectors.metrics import changes, promclient
from collectors.packages import parse as pp
from collectors.podlogs import cri
from forensics import kmsg, xid
from forensics.timeutil import from_usec, iso_z, parse_iso, parse_span, parse_when, tz_from_tzif

settings.register_profile("fuzz", max_examples=200, deadline=None, database=None,
                          phases=[Phase.explicit, Phase.generate, Phase.shrink],
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("fuzz")
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

UTC = timezone.utc
NOW = datetime(2026, 9, 2, 4, 5, 6, tzinfo=UTC)
BERLIN = tz_from_tzif(Path("/usr/share/zoneinfo/Europe/Berlin").read_bytes(), "Europe/Berlin")
DIGITS = st.text("0123456789", min_size=1, max_size=30)
NOISE = st.text(max_size=80)
BYTES = st.binary(max_size=300)
JSON_TEXT = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                         lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                         max_leaves=12).map(json.dumps)


def lines(*parts):
    """Newline-joined lines, each drawn from ``parts`` (near a grammar) or plain noise."""
    return st.lists(st.one_of(*parts, NOISE), max_size=8).map("\n".join)


# -- the journal: stored entries, journalctl -o json lines --------------------------------------------
FIELD = st.sampled_from(["__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "__CURSOR", "MESSAGE", "_PID"])


@given(st.one_of(JSON_TEXT, NOISE, st.builds(lambda k, v: json.dumps({k: v}), FIELD, JSON_TEXT.map(json.loads))))
@example("null")
@example('{"__REALTIME_TIMESTAMP": [1]}')
@example('{"__CURSOR": 5}')
def test_journalctl_json_lines_parse_or_raise_value_error(line):
    src = journalctl._JournalctlSource(["journalctl"], [])
    try:
        e = src._entry(line.encode())
    except ValueError:
        assert list(src._entries([line.encode()])) == [] and src.skipped == 1  # skipped, counted
        return
    assert isinstance(e, dict) and all(isinstance(e[k], int) for k in e if k.endswith("_TIMESTAMP"))


# -- the kernel: /dev/kmsg records, kern.log lines, their classification ------------------------------
KMSG = st.builds(lambda p, s, t, f, m: f"{p},{s},{t},{f};{m}", DIGITS, DIGITS, DIGITS, st.text("-c+x", max_size=3),
                 st.text(max_size=60))
XID = st.builds(lambda pci, n, rest: f"NVRM: Xid (PCI:{pci}): {n}, {rest}", st.text("0123456789abcdef:.", max_size=14),
                st.one_of(DIGITS, NOISE), NOISE)
KERNEL_TEXT = st.one_of(XID, NOISE, st.sampled_from([
    "NVRM: GPU at PCI:0000:3b:00: GPU-5e3c has fallen off the bus.",
    "NVRM: API mismatch: the client has the version 550.54, but",
    "Out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/pod1,task=x,pid=1,uid=0",
    "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 99999999999999999999999, pid=1"]))
SYSLOG = st.builds(lambda n, head, text: f"{n}\t{head} node kernel: {text}", DIGITS,
                   st.sampled_from(["Sep  2 04:05:13", "2026-09-02T04:05:13.123456+09:00", "Feb 29 00:00:00",
                                    "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+14:00"]), KERNEL_TEXT)


@given(lines(KMSG, KMSG.map(lambda r: " DEVICE=+pci:0000:3b:00.0")).map(str.encode) | BYTES)
def test_kmsg_records_never_raise(data):
    for rec in ring.parse(data):
        assert rec.at(NOW) is None or rec.at(NOW).tzinfo is not None


@given(lines(SYSLOG).map(str.encode) | BYTES, st.sampled_from([None, NOW]), st.booleans())
def test_kern_log_lines_and_their_times_never_raise(data, mtime, unknown):
    got = syslog.parse_stored(data)
    syslog.read_times(got, mtime, BERLIN, unknown)
    for line in got:
        assert line.at is None or line.at.tzinfo is not None
        assert syslog.stamp(f"{line.when} node kernel: x".encode()) == line.when  # the time text reads back


@given(KERNEL_TEXT)
@example("NVRM: Xid (PCI:0000:3b:00): 99999999999999999999999, pid=1")
def test_kernel_line_classification_never_raises(text):
    kmsg.might_matter(text)
    got = kmsg.classify(text)
    if got is not None and got[0] == "xid":
        xid.lookup(got[1]["xid"])  # any code the classifier reads is one the catalog answers
    kmsg.oom_role(text)
    kmsg.container_id(text)
    kmsg.recovery_action(text)
    assert list(kmsg.join_continuations([text, " " + text])) is not None


# -- package logs as raw text -------------------------------------------------------------------------
@given(NOISE | st.sampled_from(["2026-09-02 04:05:06 status installed systemd:amd64 255.4-1",
                                "Start-Date: 2026-09-02  04:05:06", "Upgrade: a:amd64 (1, 2), b (3",
                                "2026-09-02 04:05:06,123 INFO Packages that will be upgraded: a b"]))
def test_package_log_lines_as_raw_text_never_raise(line):
    pp.parse_dpkg_line(line)
    tag = pp.split_history_tag(line)
    if tag is not None:
        pp.parse_package_list(*tag)
        pp.parse_history_date(tag[1])
    uu = pp.parse_uu_line(line)
    if uu is not None:
        pp.uu_result(uu.level, uu.message)
        pp.uu_opener(uu.message)
        pp.uu_packages(uu.message)
    pp.rotation_key(line, "dpkg.log")
    pp.package_name(line)


# -- CRI pod logs -------------------------------------------------------------------------------------
CRI_TIME = st.one_of(st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
                     st.builds(lambda d, off: d.isoformat() + off, st.datetimes(),
                               st.sampled_from(["Z", "+09:00", "-01:00", "+14:00", "+99:99"])), NOISE)
CRI_LINE = st.builds(lambda t, s, tag, m: f"{t} {s} {tag} {m}", CRI_TIME, st.sampled_from(["stdout", "stderr", "x"]),
                     st.sampled_from(["F", "P", "X"]), NOISE)


@given(lines(CRI_LINE).map(str.encode) | BYTES)
def test_cri_lines_never_raise_and_full_lines_round_trip(data):
    problems = []
    got = list(cri.parse_lines(data, "pods/x.log", problems))
    assert len(problems) <= 3
    for ln in got:
        assert ln.at.tzinfo is not None and ln.stream in ("stdout", "stderr")
        again = list(cri.parse_lines(f"{iso_z(ln.at)} {ln.stream} F ".encode() + ln.message, "y"))
        assert [(g.at, g.stream, g.message) for g in again] == [(ln.at, ln.stream, ln.message)] or b"\n" in ln.message


@given(NOISE | CRI_TIME)
def test_cri_names_and_times_never_raise(text):
    at = cri.parse_time(text)
    assert at is None or at.tzinfo is not None
    cri.split_pod_dir(text)
    cri.order_key(text)


# -- times --------------------------------------------------------------------------------------------
WHEN = st.one_of(NOISE, st.builds(lambda s, n, u: f"{s}{n}{u}", st.sampled_from(["", "-", "+"]), DIGITS,
                                  st.sampled_from(["h", "d", "m", "w", " days", "min", "s ago", "d ago"])),
                 st.datetimes().map(lambda d: d.isoformat()),
                 st.builds(lambda d, o: d.isoformat() + o, st.datetimes(), st.sampled_from(["Z", "+14:00", "-12:00"])))


@given(WHEN)
@example("9" * 400 + "d")
@example("99999999999d")
@example("+99999999999d")
@example("-99999999999d ago")
def test_time_parsers_raise_only_value_error(text):
    try:
        span = parse_span(text)
        assert span is None or isinstance(span, timedelta)
    except ValueError:  # a span longer than timedelta holds (before: OverflowError)
        pass
    try:
        at = parse_iso(text)
        assert parse_iso(iso_z(at)) == at  # round trip
    except ValueError:
        pass
    try:
        utc, form, _, _ = parse_when(text, NOW, lambda: BERLIN, base=NOW)
        assert utc.tzinfo is not None and form in ("offset", "relative", "local")
    except ValueError:
        pass


@given(st.integers())
def test_usec_times_raise_only_documented_errors(usec):
    try:
        at = from_usec(usec)
    except (OverflowError, OSError, ValueError):
        return
    assert at.tzinfo is not None


@given(BYTES | st.sampled_from([Path("/usr/share/zoneinfo/Europe/Berlin").read_bytes()[:n] for n in (0, 44, 100, 500)]))
def test_tzif_bytes_raise_only_value_error(data):
    try:
        zone = tz_from_tzif(data, "x")
    except ValueError:
        return
    NOW.astimezone(zone)


# -- containers: OCI state/config as raw bytes, runc's log, systemctl show ----------------------------
@given(JSON_TEXT | NOISE)
def test_oci_readers_on_any_document_never_raise(text):
    try:
        doc = json.loads(text)
    except ValueError:
        return
    for f in (cp.hooks, cp.linux_devices, cp.resources_devices, cp.env_allowlisted, cp.annotations,
              cp.device_plugin_socket_mount):
        f(doc if isinstance(doc, dict) else {"x": doc})
    for f in (cp.state_created, cp.state_rules, cp.state_bundle):
        f(doc if isinstance(doc, dict) else {"x": doc})
    cp.pod_identity(doc if isinstance(doc, dict) else {})
    cp.bpf_time(doc)
    cp.bpf_device_prog_ids(doc)


RUNC = st.builds(lambda lvl, t, m: json.dumps({"level": lvl, "time": t, "msg": m}),
                 st.sampled_from(["info", "error", 3]), CRI_TIME, NOISE)


@given(lines(RUNC, st.sampled_from(["DeviceAllow=/dev/nvidiactl rw", "DevicePolicy=closed", "Id=x.scope", "=x"])))
def test_runc_log_and_systemctl_show_never_raise(text):
    for rec in cp.runc_log(text):
        assert isinstance(rec, dict)
    shown = cp.parse_systemctl_show(text)
    assert isinstance(shown, dict)
    cp.parse_devices_list(text)
    cp.parse_unit_device_settings([text])


# -- Prometheus ---------------------------------------------------------------------------------------
PROM_BODY = st.one_of(BYTES, JSON_TEXT.map(str.encode), st.builds(
    lambda status, data: json.dumps({"status": status, "data": data, "error": "x"}).encode(),
    st.sampled_from(["success", "error", None]), JSON_TEXT.map(json.loads)))


@given(st.integers(100, 599), PROM_BODY, st.sampled_from(["json", "text"]), st.booleans())
def test_prometheus_answers_parse_or_raise_prometheus_error(status, body, kind, truncated):
    try:
        promclient.PromClient._parse(status, body, kind, truncated)
    except promclient.PrometheusError:
        pass


@given(lines(st.builds(lambda v: f"prometheus_tsdb_lowest_timestamp_seconds {v}", NOISE | DIGITS),
             st.builds(lambda n, u: f"{n}{u}", DIGITS, st.sampled_from(["y", "w", "d", "h", "m", "s", "ms"]))))
@example("prometheus_tsdb_lowest_timestamp_seconds nan")
@example("9" * 400 + "d")
def test_prometheus_exposition_and_durations_never_raise(text):
    low = promclient.lowest_timestamp(text)
    assert low is None or 0 < low < 1e11
    d = promclient.duration_seconds(text)
    assert d is None or d > 0


SAMPLE = st.one_of(st.tuples(st.integers() | st.floats() | st.text(max_size=6), st.text("0123456789.e-naif", max_size=8)),
                   JSON_TEXT.map(json.loads))
RESULT = st.one_of(st.fixed_dictionaries({"metric": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
                                          "values": st.lists(SAMPLE, max_size=5)}), JSON_TEXT.map(json.loads))


@given(st.fixed_dictionaries({"min": st.lists(RESULT, max_size=3), "max": st.lists(RESULT, max_size=3)}),
       st.integers(1, 3600))
@example({"min": [{"values": [[1, "x"]]}], "max": []}, 60)
@example({"min": [5], "max": [{"values": 7}]}, 60)
@example({"min": [{"values": [[1e300, "1"]]}], "max": [{"values": [[float("nan"), "1"]]}]}, 60)
def test_prometheus_range_answers_of_any_shape_give_points_or_none(answers, step):
    points = changes.coarse_points(answers)
    assert all(isinstance(t, int) and isinstance(lo, float) and isinstance(hi, float) for t, lo, hi in points)
    changes.suspicious_spans(points, step, NOW.timestamp())
