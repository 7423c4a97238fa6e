"""collectors.packages: dpkg.log, apt history.log and unattended-upgrades.log, acquired from a host root
into a real bundle and read back into events. No mocks: every test writes real files."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tempfile
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path


from collectors import packages
from forensics.bundle import Bundle, BundleWriter
from forensics.source import CollectContext
from forensics.events import KINDS, NodeFacts
from forensics.timeutil import iso_z, tz_from_tzif

ZONEINFO = Path("/usr/share/zoneinfo")
DPKG_TS = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")


def zone(name: str):
    return tz_from_tzif((ZONEINFO / name).read_bytes(), name)


def node(name: str = "UTC") -> NodeFacts:
    return NodeFacts(tz_name=name, tz=zone(name))


def host(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    """A host root under tmp_path holding ``files`` (host path -> text or bytes)."""
    root = tmp_path / "host"
    root.mkdir(exist_ok=True)
    for path, data in files.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def collect(root: Path, tmp_path: Path, name: str = "bundle") -> Bundle:
    out = tmp_path / name
    writer = BundleWriter(out)
    packages.acquire(CollectContext(root=Path(root), writer=writer))
    writer.finish()
    return Bundle.open(out)


def by_kind(reading, kind):
    return [e for e in reading.events if e.kind == kind]


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def record(bundle: Bundle, source: str):
    return next(a for a in bundle.artifacts() if a.source == source)


def cover(reading, source):
    return next(c for c in reading.coverage if c.source == source)


# -- dpkg.log --------------------------------------------------------------------------------------
SEOUL_DPKG = """\
2026-09-02 13:05:10 startup archives unpack
2026-09-02 13:05:11 upgrade nvidia-container-toolkit:amd64 1.14.6-1 1.17.8-1
2026-09-02 13:05:11 status half-configured nvidia-container-toolkit:amd64 1.14.6-1
2026-09-02 13:05:11 status unpacked nvidia-container-toolkit:amd64 1.17.8-1
2026-09-02 13:05:12 startup packages configure
2026-09-02 13:05:12 configure nvidia-container-toolkit:amd64 1.17.8-1 <none>
2026-09-02 13:05:13 status installed nvidia-container-toolkit:amd64 1.17.8-1
2026-09-02 13:05:13 trigproc man-db:amd64 2.11.2-2 <none>
2026-09-02 13:05:14 conffile /etc/nvidia-container-runtime/config.toml keep
2026-09-02 13:05:15 remove hello:amd64 2.10-3 <none>
2026-09-02 13:05:15 purge hello:amd64 2.10-3 <none>
2026-09-02 13:05:16 disappear oldlib:amd64 1.0-1 <none>
2026-09-02 13:05:17 install hello:amd64 <aucune> 2.10-3
2026-09-02 13:05:18 frobnicate something odd
this line has no timestamp
2026-09-02 13:05:19 status installed hello:amd64 2.10-3
"""


def test_every_dpkg_line_type_becomes_one_event_in_seoul_time(tmp_path):
    b = collect(host(tmp_path, {"/var/log/dpkg.log": SEOUL_DPKG}), tmp_path)
    r = packages.read(b, node("Asia/Seoul"))
    ev = by_kind(r, "package.dpkg-action")
    assert len(ev) == 15  # 16 lines, one without a timestamp
    assert [e.attrs["action"] for e in ev] == [
        "startup", "upgrade", "status", "status", "startup", "configure", "status", "trigproc", "conffile",
        "remove", "purge", "disappear", "install", "unknown", "status"]
    up = ev[1]
    assert up.at == utc(2026, 9, 2, 4, 5, 11) and up.original == "2026-09-02 13:05:11"
    assert up.attrs == {"action": "upgrade", "package": "nvidia-container-toolkit:amd64", "old_version": "1.14.6-1",
                        "new_version": "1.17.8-1", "state": None, "ships_units": None}
    assert up.summary == "upgrade nvidia-container-toolkit:amd64 1.14.6-1 → 1.17.8-1"
    assert up.evidence == {"artifact": "packages/dpkg/dpkg.log", "line": 2} and up.source == "dpkg"
    assert iso_z(ev[6].at) == "2026-09-02T04:05:13Z"
    assert ev[6].attrs["state"] == "installed" and ev[6].attrs["new_version"] == "1.17.8-1"
    assert ev[0].attrs["state"] == "archives unpack" and ev[4].attrs["state"] == "packages configure"
    assert ev[8].attrs["package"] == "/etc/nvidia-container-runtime/config.toml" and ev[8].attrs["state"] == "keep"
    assert ev[12].attrs["old_version"] is None and ev[12].attrs["new_version"] == "2.10-3"  # localised <none>
    assert ev[13].flags == ("unparsed",) and ev[13].evidence["line"] == 14
    assert r.problems == [{"artifact": "packages/dpkg/dpkg.log", "line": 15,
                           "message": "no timestamp: this line has no timestamp"}]
    assert all(set(e.attrs) == set(KINDS[e.kind].attrs) for e in r.events)
    assert r.facts["packages_last_change"] == {"hello": "2026-09-02T04:05:17Z", "oldlib": "2026-09-02T04:05:16Z",
                                               "nvidia-container-toolkit": "2026-09-02T04:05:11Z"}
    c = cover(r, "dpkg")
    assert (c.start, c.end) == (utc(2026, 9, 2, 4, 5, 10), utc(2026, 9, 2, 4, 5, 19))
    assert c.reason == "dpkg.log covers 2026-09-02 .. 2026-09-02"


def test_dpkg_lines_are_held_deferred_and_made_alike_on_first_access(tmp_path):
    import pickle
    from forensics.events import Event
    b = collect(host(tmp_path, {"/var/log/dpkg.log": SEOUL_DPKG}), tmp_path)
    r = packages.read(b, node("Asia/Seoul"))
    ev = by_kind(r, "package.dpkg-action")
    # the facts and coverage were taken without making any line's summary, attrs, evidence or original
    assert r.facts["packages_last_change"]["hello"] == "2026-09-02T04:05:17Z"
    assert len(ev) == 15 and all(e._make is not None for e in ev)
    later = pickle.loads(pickle.dumps(ev[2]))  # an unmade line survives pickling (journal's child reader)
    assert ev[2] == Event(utc(2026, 9, 2, 4, 5, 11), "dpkg", "package.dpkg-action",
                          "status half-configured nvidia-container-toolkit:amd64 1.14.6-1",
                          {"action": "status", "package": "nvidia-container-toolkit:amd64", "old_version": None,
                           "new_version": "1.14.6-1", "state": "half-configured", "ships_units": None},
                          {"artifact": "packages/dpkg/dpkg.log", "line": 3}, "2026-09-02 13:05:11") == later
    assert ev[2]._make is None and ev[3]._make is not None  # made once, for that line only
    ev[3].summary = "set before"  # a field assigned before the others are made keeps its value
    assert ev[3].attrs["state"] == "unpacked" and ev[3].summary == "set before"


def test_dst_fold_and_gap_in_new_york(tmp_path):
    log = ("2026-03-08 01:59:59 startup archives unpack\n"
           "2026-03-08 02:30:00 upgrade systemd:amd64 252.38-1 252.39-1\n"      # never happened: gap
           "2026-11-01 01:30:00 configure systemd:amd64 252.39-1 <none>\n"      # happened twice: fold
           "2026-11-01 03:00:00 status installed systemd:amd64 252.39-1\n")
    b = collect(host(tmp_path, {"/var/log/dpkg.log": log}), tmp_path)
    ev = packages.read(b, node("America/New_York")).events
    assert [(iso_z(e.at), e.flags) for e in ev] == [
        ("2026-03-08T06:59:59Z", ()),
        ("2026-03-08T07:30:00Z", ("dst-gap",)),     # shifted forward to 03:30 EDT
        ("2026-11-01T05:30:00Z", ("dst-fold",)),    # first occurrence, 01:30 EDT
        ("2026-11-01T08:00:00Z", ())]
    assert ev[1].original == "2026-03-08 02:30:00"


def test_rotations_read_oldest_first_with_numeric_order_and_gz_kept_raw(tmp_path):
    files = {}
    for n in range(1, 12):  # .11 oldest ... .1 newest; .10 and .11 must come before .9
        text = f"2026-01-{28 - 2 * n:02d} 10:00:00 install p{n}:amd64 <none> 1.0\n".encode()
        files[f"/var/log/dpkg.log.{n}" + ("" if n in (1, 7) else ".gz")] = text if n in (1, 7) else gzip.compress(text)
    files["/var/log/dpkg.log"] = "2026-01-29 10:00:00 install p0:amd64 <none> 1.0\n"
    files["/var/log/dpkg.log.old"] = "not a rotation\n"
    b = collect(host(tmp_path, files), tmp_path)
    gz = b.path("packages/dpkg/dpkg.log.10.gz").read_bytes()
    assert gz == files["/var/log/dpkg.log.10.gz"]  # stored raw, still compressed
    assert not b.path("packages/dpkg/dpkg.log.old").exists()
    r = packages.read(b, node())
    assert [e.attrs["package"] for e in r.events] == [f"p{n}:amd64" for n in range(11, -1, -1)]
    assert [e.evidence["artifact"] for e in r.events][:3] == [
        "packages/dpkg/dpkg.log.11.gz", "packages/dpkg/dpkg.log.10.gz", "packages/dpkg/dpkg.log.9.gz"]
    assert not any(e.flags for e in r.events) and r.problems == []
    assert cover(r, "dpkg").reason == "dpkg.log and 11 rotations cover 2026-01-06 .. 2026-01-29"


def test_a_missing_rotation_in_the_middle_is_a_hole_in_dpkg_coverage(tmp_path):
    day = lambda d: f"2026-{d} 10:00:00 upgrade hello:amd64 2.10-2 2.10-3\n"  # noqa: E731
    files = {"/var/log/dpkg.log": day("04-01"), "/var/log/dpkg.log.1": day("03-01"),
             "/var/log/dpkg.log.3.gz": gzip.compress(day("01-01").encode()),   # .2.gz (February) is gone
             "/var/log/dpkg.log.4.gz": gzip.compress(day("01-01").replace("01-01 10", "01-01 09").encode())}
    r = packages.read(collect(host(tmp_path, files), tmp_path), node())
    c = cover(r, "dpkg")
    assert (c.start, c.end and c.end >= utc(2026, 4, 1, 10)) == (utc(2026, 1, 1, 9), True)
    [hole] = c.holes
    assert (hole.start, hole.end) == (utc(2026, 1, 1, 10), utc(2026, 3, 1, 10))
    assert hole.reason == ("no stored file holds dpkg.log lines from 2026-01-01T10:00:00Z to 2026-03-01T10:00:00Z: "
                           "dpkg.log.2 missing between dpkg.log.3.gz and dpkg.log.1")
    assert c.uncertain is None and not any(e.flags for e in r.events)


def test_an_unknown_zone_flags_every_package_time_and_its_coverage(tmp_path):
    files = {"/var/log/dpkg.log": "2026-09-02 13:05:11 upgrade hello:amd64 2.10-2 2.10-3\n",
             "/var/log/apt/history.log": "\nStart-Date: 2026-09-02  13:05:00\nCommandline: apt-get -y upgrade\nUpgrade: hello:amd64 (2.10-2, 2.10-3)\n"
             "End-Date: 2026-09-02  13:05:20\n"}
    unknown = NodeFacts(tz_name="UTC (node zone unknown)", tz=timezone.utc, tz_unknown=True)
    r = packages.read(collect(host(tmp_path, files), tmp_path), unknown)
    assert sorted((e.source, iso_z(e.at), e.flags) for e in r.events) == [
        ("apt", "2026-09-02T13:05:00Z", ("tz-unknown",)), ("dpkg", "2026-09-02T13:05:11Z", ("tz-unknown",))]
    for source in ("dpkg", "apt"):
        c = cover(r, source)
        assert c.uncertain == "node time zone unknown: dpkg/apt times uncertain by ±14 h"
        assert c.reason.endswith("; node time zone unknown: dpkg/apt times uncertain by ±14 h")
    assert cover(r, "unattended-upgrades").uncertain is None   # nothing collected, nothing to be uncertain about


def test_out_of_order_lines_are_flagged_not_reordered(tmp_path):
    rotated = "2026-05-02 10:00:00 install a:amd64 <none> 1\n"
    current = ("2026-05-03 10:00:00 install b:amd64 <none> 1\n"
               "2026-05-01 09:00:00 install c:amd64 <none> 1\n"    # clock stepped back
               "2026-05-03 10:00:01 install d:amd64 <none> 1\n")
    b = collect(host(tmp_path, {"/var/log/dpkg.log.1": rotated, "/var/log/dpkg.log": current}), tmp_path)
    r = packages.read(b, node())
    assert [(e.attrs["package"], e.flags) for e in r.events] == [
        ("a:amd64", ()), ("b:amd64", ()), ("c:amd64", ("out-of-order",)), ("d:amd64", ())]
    c = cover(r, "dpkg")
    assert (c.start, c.end) == (utc(2026, 5, 1, 9), utc(2026, 5, 3, 10, 0, 1))


# -- apt history.log -------------------------------------------------------------------------------
HISTORY = """
Start-Date: 2026-03-08  02:30:00
Commandline: /usr/bin/unattended-upgrade
Upgrade: foo:amd64 (1.0-1, 1.1-1), nvidia-container-toolkit:amd64 (1.14.6-1, 1.17.8-1)
Downgrade: bar:amd64 (2.0, 1.9)
Remove: baz:amd64 (0.1)
Purge: qux:amd64 (0.2)
Reinstall: zed:amd64 (3.0)
Disappeared: gone (1.0)
Error: Sub-process /usr/bin/dpkg returned an error code (1)
End-Date: 2026-03-08  03:31:00

Start-Date: 2026-11-01  01:30:00
Commandline: apt-get install -y hello
Requested-By: ops (1000)
Install: hello:amd64 (2.10-3), libfoo1:amd64 (1.0-1, automatic)
End-Date: 2026-11-01  01:30:05

Start-Date: 2026-11-30  01:47:38
Commandline: apt-get install -y hello
Install: hello:amd64 (2.10-3)

Start-Date: 2026-11-30  01:50:00
Comment: testing the comment tag
Upgrade: systemd:amd64 (252.38-1~deb12u1, 252.39-1~deb12u1)
"""


def test_history_stanzas_packages_dst_and_interrupted(tmp_path):
    b = collect(host(tmp_path, {"/var/log/apt/history.log": HISTORY}), tmp_path)
    r = packages.read(b, node("America/New_York"))
    t = by_kind(r, "package.transaction")
    assert len(t) == 4 and r.problems == []
    uu, hello, cut, last = t
    assert (iso_z(uu.at), uu.flags, uu.attrs["end"]) == ("2026-03-08T07:30:00Z", ("dst-gap",), "2026-03-08T07:31:00Z")
    assert uu.original == "2026-03-08  02:30:00" and uu.evidence == {"artifact": "packages/apt/history.log", "line": 2}
    assert uu.attrs["packages"] == [
        {"name": "foo", "arch": "amd64", "action": "upgrade", "old": "1.0-1", "new": "1.1-1", "automatic": False},
        {"name": "nvidia-container-toolkit", "arch": "amd64", "action": "upgrade", "old": "1.14.6-1",
         "new": "1.17.8-1", "automatic": False},
        {"name": "bar", "arch": "amd64", "action": "downgrade", "old": "2.0", "new": "1.9", "automatic": False},
        {"name": "baz", "arch": "amd64", "action": "remove", "old": "0.1", "new": None, "automatic": False},
        {"name": "qux", "arch": "amd64", "action": "purge", "old": "0.2", "new": None, "automatic": False},
        {"name": "zed", "arch": "amd64", "action": "reinstall", "old": "3.0", "new": "3.0", "automatic": False},
        {"name": "gone", "arch": None, "action": "disappeared", "old": "1.0", "new": None, "automatic": False}]
    assert uu.attrs["error"] == "Sub-process /usr/bin/dpkg returned an error code (1)"
    assert uu.attrs["command"] == "/usr/bin/unattended-upgrade" and uu.attrs["requested_by"] is None
    assert (iso_z(hello.at), hello.flags) == ("2026-11-01T05:30:00Z", ("dst-fold",))
    assert hello.attrs["requested_by"] == "ops (1000)" and hello.attrs["end"] == "2026-11-01T05:30:05Z"
    assert hello.attrs["packages"][1] == {"name": "libfoo1", "arch": "amd64", "action": "install", "old": None,
                                          "new": "1.0-1", "automatic": True}
    assert hello.summary == "apt transaction: apt-get install -y hello (2 packages)"
    assert hello.attrs["error"] is None
    assert (iso_z(cut.at), cut.flags, cut.attrs["end"]) == ("2026-11-30T06:47:38Z", ("interrupted",), None)
    assert last.flags == ("interrupted",) and last.attrs["command"] is None  # ends at EOF
    assert "comment: testing the comment tag" in last.summary
    assert all(set(e.attrs) == set(KINDS[e.kind].attrs) for e in t)
    c = cover(r, "apt")
    assert (iso_z(c.start), iso_z(c.end)) == ("2026-03-08T07:30:00Z", "2026-11-30T06:50:00Z")


def test_history_with_broken_lines_reports_them(tmp_path):
    text = ("Install: orphan:amd64 (1)\n\nStart-Date: 2026-13-45  01:00:00\nInstall: x:amd64 (1)\n"
            "End-Date: 2026-01-01  01:00:01\n\nStart-Date: 2026-01-02  01:00:00\nthis is not a tag\n"
            "Install: ok:amd64 (1), broken item), y:amd64 (2)\nEnd-Date: 2026-01-02  01:00:02\n")
    b = collect(host(tmp_path, {"/var/log/apt/history.log": text}), tmp_path)
    r = packages.read(b, node())
    t = by_kind(r, "package.transaction")
    assert len(t) == 1 and [p["name"] for p in t[0].attrs["packages"]] == ["ok", "y"]
    assert [(p["line"], p["message"].split(":")[0]) for p in r.problems] == [
        (1, "Install line outside a Start-Date stanza"), (3, "Start-Date is not a date"),
        (8, "not a 'Tag"), (9, "unparsed Install item")]


# -- maintainer scripts ----------------------------------------------------------------------------
DH_SNIPPET = """#!/bin/sh
set -e
# Automatically added by dh_installsystemd/13.11.4
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ] ; then
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		if [ -n "$2" ]; then
			_dh_action=restart
		else
			_dh_action=start
		fi
		deb-systemd-invoke $_dh_action 'foo.service' >/dev/null || true
	fi
fi
# End automatically added section
"""


def test_units_json_and_ships_units(tmp_path):
    root = host(tmp_path, {
        "/var/lib/dpkg/info/foo.postinst": DH_SNIPPET,
        "/var/lib/dpkg/info/libgpu:amd64.postrm": "#!/bin/sh\nsystemctl --system daemon-reload >/dev/null || true\n",
        "/var/lib/dpkg/info/bar.postinst": "#!/bin/sh\nldconfig\n",
        "/var/lib/dpkg/info/foo.list": "daemon-reload\n",
        "/var/log/dpkg.log": "2026-05-01 06:00:00 upgrade foo:amd64 1.0 1.1\n2026-05-01 06:00:01 upgrade bar:amd64 1 2\n",
        "/var/log/apt/history.log": "\nStart-Date: 2026-05-01  06:00:00\nCommandline: apt-get upgrade\n"
                                    "Upgrade: foo:amd64 (1.0, 1.1), bar:amd64 (1, 2), libgpu:amd64 (3, 4)\n"
                                    "End-Date: 2026-05-01  06:00:02\n"})
    b = collect(root, tmp_path)
    units = json.loads(b.path("packages/units.json").read_text())
    assert units == {"foo": {"postinst": ["daemon-reload", "deb-systemd-invoke", "dh_installsystemd"], "postrm": []},
                     "libgpu": {"postinst": [], "postrm": ["daemon-reload"]}}
    assert record(b, "/var/lib/dpkg/info/*.postinst, /var/lib/dpkg/info/*.postrm").notes[0].startswith(
        "scanned 3 maintainer scripts")
    r = packages.read(b, node())
    assert [e.attrs["ships_units"] for e in by_kind(r, "package.dpkg-action")] == [True, False]
    assert by_kind(r, "package.transaction")[0].attrs["ships_units"] == ["foo", "libgpu"]
    assert r.facts["packages_with_unit_scripts"] == 2


# -- missing sources -------------------------------------------------------------------------------
def test_absent_sources_are_recorded_and_explained(tmp_path):
    b = collect(host(tmp_path, {"/etc/hostname": "node\n"}), tmp_path)
    for src in ("/var/log/dpkg.log", "/var/log/apt/history.log", "/var/log/unattended-upgrades",
                "/var/lib/dpkg/info"):
        assert record(b, src).status.value == "absent", src
    r = packages.read(b, node())
    assert r.events == [] and r.problems == []
    assert [(c.source, c.start, c.end, c.reason) for c in r.coverage] == [
        ("dpkg", None, None, "absent: /var/log/dpkg.log not found on the node"),
        ("apt", None, None, "absent: /var/log/apt/history.log not found on the node"),
        ("unattended-upgrades", None, None, "absent: /var/log/unattended-upgrades not found on the node")]
    assert r.facts["packages_with_unit_scripts"] is None


def test_directory_in_place_of_a_log_is_an_error_record(tmp_path):
    root = host(tmp_path, {"/var/log/unattended-upgrades/other.txt": "x"})
    (root / "var/log/dpkg.log").mkdir()
    b = collect(root, tmp_path)
    assert record(b, "/var/log/dpkg.log").status.value == "error"
    assert record(b, "/var/log/unattended-upgrades/unattended-upgrades.log").status.value == "absent"
    r = packages.read(b, node())
    assert cover(r, "dpkg").reason.startswith("error: /var/log/dpkg.log: ")
    assert cover(r, "unattended-upgrades").reason == \
        "absent: /var/log/unattended-upgrades/unattended-upgrades.log not found on the node"


def test_permission_denied_reads_as_unreadable_never_absent():
    # root ignores file modes, so the collection runs in a child as nobody (65534)
    from privdrop import run_as_nobody
    work = Path(tempfile.mkdtemp(prefix="gf-packages-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)
        root = host(work, {"/var/log/dpkg.log": "2026-05-01 06:00:00 install a:amd64 <none> 1\n",
                           "/var/log/dpkg.log.1": "2026-04-01 06:00:00 install b:amd64 <none> 1\n",
                           "/var/log/apt/history.log": "Start-Date: 2026-05-01  06:00:00\n",
                           "/var/log/unattended-upgrades/unattended-upgrades.log": "x\n",
                           "/var/lib/dpkg/info/foo.postinst": DH_SNIPPET,
                           "/var/lib/dpkg/info/bar.postinst": DH_SNIPPET})
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        os.chmod(root / "var/log/dpkg.log", 0o600)
        os.chmod(root / "var/log/unattended-upgrades", 0o700)
        os.chmod(root / "var/lib/dpkg/info/bar.postinst", 0o600)
        (work / "out").mkdir(mode=0o777)
        os.chmod(work / "out", 0o777)

        def child():
            writer = BundleWriter(work / "out/bundle")
            packages.acquire(CollectContext(root=root, writer=writer))
            writer.finish()

        run_as_nobody(child)
        b = Bundle.open(work / "out/bundle")
        for src in ("/var/log/dpkg.log", "/var/log/unattended-upgrades"):
            assert (record(b, src).status.value, record(b, src).errno) == ("unreadable", 13), src
        assert record(b, "/var/log/dpkg.log.1").status.value == "collected"
        assert json.loads(b.path("packages/units.json").read_text()) == {
            "foo": {"postinst": ["daemon-reload", "deb-systemd-invoke", "dh_installsystemd"], "postrm": []}}
        assert "1 scripts could not be read: bar.postinst: EACCES" in \
            record(b, "/var/lib/dpkg/info/*.postinst, /var/lib/dpkg/info/*.postrm").notes
        r = packages.read(b, node())
        assert [e.attrs["package"] for e in r.events if e.source == "dpkg"] == ["b:amd64"]
        assert cover(r, "dpkg").reason == ("1 rotation of dpkg.log cover 2026-04-01 .. 2026-04-01; current dpkg.log "
                                           "not stored (unreadable: /var/log/dpkg.log (EACCES: Permission denied))")
        assert cover(r, "unattended-upgrades").reason == \
            "unreadable: /var/log/unattended-upgrades (EACCES: Permission denied)"
    finally:
        shutil.rmtree(work)


# -- hostile inputs --------------------------------------------------------------------------------
def test_hostile_files_record_problems_and_the_rest_is_read(tmp_path):
    good = "2026-05-01 06:00:00 install ok:amd64 <none> 1\n"
    truncated = gzip.compress("".join(f"2026-04-01 06:00:00 install early:amd64 <none> {i}\n"
                                      for i in range(2000)).encode())[:-200]
    long_line = b"2026-04-25 06:00:00 install " + b"x" * (10 * 1024 * 1024) + b"\n"
    files = {
        "/var/log/dpkg.log": good,
        "/var/log/dpkg.log.1": b"2026-04-30 06:00:00 install caf\xe9:amd64 <none> 1\n\xff\xfe\n" + long_line
                               + b"2026-04-30 07:00:00 install after-long:amd64 <none> 1\n",
        "/var/log/dpkg.log.2.gz": b"this is not gzip at all\n",
        "/var/log/dpkg.log.3.gz": b"",
        "/var/log/dpkg.log.4.gz": truncated,
        "/var/log/apt/history.log": b"",
        "/var/log/unattended-upgrades/unattended-upgrades.log": b"\x00\x01\x02 garbage\n",
    }
    b = collect(host(tmp_path, files), tmp_path)
    r = packages.read(b, node())
    pk = [e.attrs["package"] for e in by_kind(r, "package.dpkg-action")]
    assert pk[-3:] == ["caf\ufffd:amd64", "after-long:amd64", "ok:amd64"]
    assert 0 < pk.count("early:amd64") < 2000  # the lines before the cut are kept
    msgs = {(p["artifact"].rsplit("/", 1)[-1], p.get("line"), p["message"].split(" (")[0].split(":")[0])
            for p in r.problems}
    assert ("dpkg.log.2.gz", None, "named .gz but not gzip data; not read") in msgs
    assert ("dpkg.log.3.gz", None, "empty file") in msgs
    assert ("dpkg.log.1", 3, f"line of {len(long_line)} bytes") in msgs
    assert ("dpkg.log.1", 2, "no timestamp") in msgs
    assert ("dpkg.log.1", 1, "2 lines hold bytes that are not UTF-8") in msgs
    assert any(p["artifact"].endswith("dpkg.log.4.gz") and "read stopped" in p["message"] for p in r.problems)
    assert not [m for m in msgs if m[0] == "history.log"]  # an empty current log is no problem (issue 28)
    assert ("unattended-upgrades.log", 1, "no timestamp") in msgs
    assert cover(r, "apt").reason == "history.log covers nothing: no dated entries"


def test_memory_stays_flat_in_file_size(tmp_path):
    # 23 MB of lines without a timestamp (only 20 problems kept) and a 10 MB line.
    junk = gzip.compress(b"no timestamp on this line at all, just filler text.....\n" * 400_000, 1)
    files = {"/var/log/dpkg.log.2.gz": junk,
             "/var/log/dpkg.log.1": b"2026-01-01 00:00:00 " + b"y" * (10 << 20) + b"\n",
             "/var/log/dpkg.log": "2026-01-02 00:00:00 install z:amd64 <none> 1\n"}
    b = collect(host(tmp_path, files), tmp_path)
    tracemalloc.start()
    r = packages.read(b, node())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20, peak
    assert len(r.events) == 1
    assert r.problems[20] == {"artifact": "packages/dpkg/dpkg.log.2.gz",
                              "message": f"{400_000 - 20} more line problems not listed"}


# -- unattended-upgrades ---------------------------------------------------------------------------
UU_LOG = """\
2024-05-01 06:25:13,123 INFO Initial blacklisted packages: 
2024-05-01 06:25:13,124 INFO Starting unattended upgrades script
2024-05-01 06:25:13,125 INFO Allowed origins are: ['origin=Debian,codename=bookworm,label=Debian-Security']
2024-05-01 06:25:20,500 INFO Packages that will be upgraded: nvidia-container-toolkit libnvidia-container1
2024-05-01 06:25:20,501 INFO Writing dpkg log to /var/log/unattended-upgrades/unattended-upgrades-dpkg.log
2024-05-01 06:26:02,999 INFO All upgrades installed
2024-05-02 06:10:00,000 INFO Starting unattended upgrades script
2024-05-02 06:10:01,000 INFO No packages found that can be upgraded unattended and no pending auto-removals
2024-05-03 06:10:00,000 INFO Starting unattended upgrades script
2024-05-03 06:10:05,000 INFO Packages that will be upgraded: systemd
2024-05-03 06:11:00,000 ERROR Installing the upgrades failed!
2024-05-03 06:11:00,001 ERROR error message: 'installArchives() failed'
Traceback (most recent call last):
  File "/usr/bin/unattended-upgrade", line 1
2024-05-04 06:00:00,000 INFO Unbeaufsichtigte Aktualisierungen werden gestartet
2024-05-04 06:00:09,000 INFO Pakete, die aktualisiert werden: foo
2024-05-04 06:02:00,000 INFO Alle Aktualisierungen wurden installiert
2024-05-05 06:00:00,000 INFO Unbeaufsichtigte Aktualisierungen werden gestartet
2024-05-05 06:00:09,000 ERROR Fehler beim Installieren
"""


def test_unattended_upgrade_runs(tmp_path):
    files = {"/var/log/unattended-upgrades/unattended-upgrades.log": UU_LOG,
             "/var/log/unattended-upgrades/unattended-upgrades-dpkg.log": "Log started: 2024-05-01  06:25:20\n",
             "/var/log/unattended-upgrades/unattended-upgrades.log.1.gz":
                 gzip.compress(b"2024-04-30 06:00:00,000 INFO Starting unattended upgrades script\n")}
    b = collect(host(tmp_path, files), tmp_path)
    assert b.path("packages/unattended-upgrades/unattended-upgrades-dpkg.log").is_file()
    r = packages.read(b, node("Asia/Seoul"))
    runs = by_kind(r, "package.unattended-run")
    assert [(iso_z(e.at), e.attrs["end"], e.attrs["packages"], e.attrs["result"], e.evidence["line"]) for e in runs] == [
        ("2024-04-29T21:00:00Z", "2024-04-29T21:00:00Z", [], None, 1),
        ("2024-04-30T21:25:13.123000Z", "2024-04-30T21:26:02.999000Z",
         ["nvidia-container-toolkit", "libnvidia-container1"], "installed", 1),
        ("2024-05-01T21:10:00Z", "2024-05-01T21:10:01Z", [], "nothing-to-do", 7),
        ("2024-05-02T21:10:00Z", "2024-05-02T21:11:00.001000Z", ["systemd"], "failed", 9),
        ("2024-05-03T21:00:00Z", "2024-05-03T21:02:00Z", [], None, 15),
        ("2024-05-04T21:00:00Z", "2024-05-04T21:00:09Z", [], "failed", 18)]
    assert runs[1].original == "2024-05-01 06:25:13,123" and runs[1].source == "unattended-upgrades"
    assert runs[1].summary == ("unattended-upgrades run: 2 packages to upgrade: nvidia-container-toolkit "
                               "libnvidia-container1, result installed")
    assert r.problems == []
    assert cover(r, "unattended-upgrades").reason == \
        "unattended-upgrades.log and 1 rotation cover 2024-04-30 .. 2024-05-05"


# -- line grammars under arbitrary input -----------------------------------------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from collectors.packages import parse as pp  # noqa: E402

TEXT = st.text(st.characters(codec="utf-8"), max_size=200) | st.from_regex(
    r"\A\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(,\d{0,7})? ?[a-zA-Z<>:().,-]{0,12}( [^\n]{0,40}){0,5}\Z")


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_line_parsers_never_raise(line):
    d = pp.parse_dpkg_line(line)
    assert d is None or (d.action in pp.DPKG_PKG_ACTIONS + ("status", "startup", "conffile", "unknown")
                         and d.parsed == (d.action != "unknown"))
    u = pp.parse_uu_line(line)
    assert u is None or isinstance(u.when, datetime)
    assert pp.parse_history_date(line) is None or isinstance(pp.parse_history_date(line), datetime)
    kv = pp.split_history_tag(line)
    if kv:
        pkgs, bad = pp.parse_package_list(kv[0], kv[1])
        assert all(set(p) == {"name", "arch", "action", "old", "new", "automatic"} for p in pkgs)
    pp.parse_package_list("Upgrade", line)
    pp.uu_result("ERROR", line), pp.uu_packages(line), pp.rotation_key(line, "dpkg.log")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(pp.DPKG_PKG_ACTIONS), st.from_regex(r"\A[a-z0-9][a-z0-9+.-]{0,20}:(amd64|all|arm64)\Z"),
       st.from_regex(r"\A([0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,15}\Z") | st.just("<none>"),
       st.from_regex(r"\A[0-9][A-Za-z0-9.+~-]{0,15}\Z"))
def test_every_well_formed_dpkg_action_line_parses(action, package, old, new):
    d = pp.parse_dpkg_line(f"2026-11-30 01:47:39 {action} {package} {old} {new}")
    assert (d.action, d.package, d.old_version, d.new_version, d.parsed) == (
        action, package, None if old == "<none>" else old, new, True)


def test_rotation_names_sort_oldest_first():
    names = ["dpkg.log", "dpkg.log.1", "dpkg.log.10.gz", "dpkg.log.2.gz", "dpkg.log.9", "dpkg.log.11",
             "dpkg.log-20260101.gz"]
    assert sorted(names, key=lambda n: pp.rotation_key(n, "dpkg.log")) == [
        "dpkg.log-20260101.gz", "dpkg.log.11", "dpkg.log.10.gz", "dpkg.log.9", "dpkg.log.2.gz", "dpkg.log.1",
        "dpkg.log"]
    assert [pp.rotation_key(n, "dpkg.log") for n in ("dpkg.log.old", "xdpkg.log", "dpkg.log.1.xz")] == [None] * 3


# -- credentials in package logs (security: URLs with credentials are redacted in bundles) -------------
PROXY_STANZA = ("\nStart-Date: 2026-09-02  13:04:50\n"
                "Commandline: apt-get -o Acquire::http::Proxy=http://ops:Hunter2-proxy@10.0.0.5:3128 install -y "
                "monitoring-plugins-basic\n"
                "Install: monitoring-plugins-basic:amd64 (2.2-3), libcap2-bin:amd64 (1:2.25-1, automatic)\n"
                "End-Date: 2026-09-02  13:04:58\n")


def test_a_proxy_password_in_apt_history_never_reaches_the_bundle(tmp_path):
    clean = gzip.compress(("\nStart-Date: 2026-08-01  10:00:00\nCommandline: apt-get install -y basic\n"
                           "Install: basic:amd64 (1.0)\nEnd-Date: 2026-08-01  10:00:02\n").encode())
    cut = gzip.compress(PROXY_STANZA.encode(), mtime=0)
    root = host(tmp_path, {"/var/log/apt/history.log": PROXY_STANZA, "/var/log/apt/history.log.1.gz":
                           gzip.compress(PROXY_STANZA.encode()), "/var/log/apt/history.log.2.gz": clean,
                           "/var/log/apt/history.log.3.gz": cut[:len(cut) - 12],  # rotated mid-write
                           "/var/log/unattended-upgrades/unattended-upgrades-dpkg.log":
                           "Log started: 2026-09-02  13:04:50\nGet:1 https://ci:tok3n-abc@repo.example/x y\n"})
    b = collect(root, tmp_path)
    for f in (tmp_path / "bundle").rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            text = gzip.decompress(data) if f.suffix == ".gz" and data[:2] == b"\x1f\x8b" else data
            assert b"Hunter2-proxy" not in text and b"tok3n-abc" not in text, f
    # the file with nothing to hide is kept byte for byte; the others say what was done
    assert (tmp_path / "bundle/packages/apt/history.log.2.gz").read_bytes() == clean
    assert record(b, "/var/log/apt/history.log.2.gz").notes == ()
    assert record(b, "/var/log/apt/history.log").notes == (
        "credentials redacted in 1 lines (URL credentials, Bearer/Basic values, NAME=X for credential names, "
        "secret shapes (detect-secrets: cloud and forge tokens, private keys, password/key/token assignments))",)
    assert record(b, "/var/log/apt/history.log.3.gz").notes[1] == \
        "the .gz was cut short on the node: stored recompressed with what it held"
    # and the redacted logs still read: same transactions, package names untouched ("basic" is no scheme)
    t = by_kind(packages.read(b, node("Asia/Seoul")), "package.transaction")
    assert sorted(iso_z(e.at) for e in t) == ["2026-08-01T01:00:00Z"] + ["2026-09-02T04:04:50Z"] * 3
    proxy = [e for e in t if iso_z(e.at) == "2026-09-02T04:04:50Z"]
    assert all(e.attrs["command"].startswith("apt-get -o Acquire::http::Proxy=http://<redacted>@10.0.0.5:3128 ")
               for e in proxy)
    assert all([p["name"] for p in e.attrs["packages"]] == ["monitoring-plugins-basic", "libcap2-bin"] for e in proxy)
    assert [e.attrs["command"] for e in t if e not in proxy] == ["apt-get install -y basic"]


def test_no_redact_keeps_the_package_logs_raw(tmp_path):
    root = host(tmp_path, {"/var/log/apt/history.log": PROXY_STANZA})
    out = tmp_path / "raw"
    writer = BundleWriter(out)
    packages.acquire(CollectContext(root=root, writer=writer, redact=False))
    writer.finish()
    assert (out / "packages/apt/history.log").read_text() == PROXY_STANZA
