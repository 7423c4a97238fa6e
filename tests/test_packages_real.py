"""collectors.packages against real package logs: this machine's own /var/log, and the corpus in
../shared/real-inputs (copied into a tmp host root at test time, never into the project).

Every expected count is computed here, independently, from the files themselves."""
from __future__ import annotations

import collections
import gzip
import re
import shutil
from pathlib import Path

import pytest

from collectors import packages
from forensics.events import KINDS, NodeFacts
from forensics.timeutil import iso_z, tz_from_tzif

from test_packages import by_kind, collect, cover, node, utc

DPKG_TS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (\S+)")


def text_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace").splitlines()


def host_from(tmp_path: Path, real_inputs: Path, mapping: dict[str, str]) -> Path:
    root = tmp_path / "host"
    for src, dst in mapping.items():
        d = root / dst.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        for f in (real_inputs / src).iterdir():
            if f.is_file():
                shutil.copyfile(f, d / f.name)
    return root


def action_counter(lines):
    return collections.Counter(m.group(1) for line in lines if (m := DPKG_TS.match(line)))


# -- this machine ----------------------------------------------------------------------------------
def test_this_machines_own_dpkg_and_apt_history(tmp_path):
    b = collect(Path("/"), tmp_path)
    tz = tz_from_tzif(Path("/etc/localtime").read_bytes())
    r = packages.read(b, NodeFacts(tz=tz))
    # Counted from the bundle's copies: apt may be running on this machine right now.
    dpkg_files = b.find("packages/dpkg/")
    apt_files = b.find("packages/apt/")
    assert dpkg_files and apt_files, "this Debian test machine has /var/log/dpkg.log and apt history.log"
    dpkg_lines = [line for a in dpkg_files for line in text_lines(b.path(a.path))]
    actions = by_kind(r, "package.dpkg-action")
    assert len(actions) == sum(action_counter(dpkg_lines).values())
    assert collections.Counter(e.attrs["action"] for e in actions) == action_counter(dpkg_lines)
    starts = sum(1 for a in apt_files for line in text_lines(b.path(a.path)) if line.startswith("Start-Date:"))
    assert len(by_kind(r, "package.transaction")) == starts > 0
    assert r.facts["package_event_counts"]["dpkg"] == len(actions)
    for a in dpkg_files + apt_files:  # the live file only grows while the test runs
        live = text_lines(Path(a.source))
        stored = text_lines(b.path(a.path))
        assert len(live) >= len(stored), a.source
    assert not [p for p in r.problems if "read stopped" in p["message"] or "not gzip" in p["message"]]
    assert cover(r, "dpkg").start is not None and cover(r, "apt").start is not None
    assert all(set(e.attrs) == set(KINDS[e.kind].attrs) for e in r.events)
    units = __import__("json").loads(b.path("packages/units.json").read_text())
    assert "systemd-timesyncd" in units or "dbus" in units  # both ship units on Debian 12


# -- corpus ----------------------------------------------------------------------------------------
@pytest.mark.corpus
def test_debian9_server_dpkg_log_and_ten_rotations(tmp_path, real_inputs):
    src = real_inputs / "dpkg/debian9-server-rotated"
    b = collect(host_from(tmp_path, real_inputs, {"dpkg/debian9-server-rotated": "/var/log"}), tmp_path)
    assert len(b.find("packages/dpkg/")) == 11
    r = packages.read(b, node("Europe/Brussels"))
    lines = [line for f in sorted(src.iterdir()) for line in text_lines(f)]
    ev = by_kind(r, "package.dpkg-action")
    assert len(ev) == len(lines) == 11313 and r.problems == []
    assert collections.Counter(e.attrs["action"] for e in ev) == action_counter(lines)
    first = ev[0]
    assert first.original == "2017-12-12 11:23:03" and first.at == utc(2017, 12, 12, 10, 23, 3)  # CET
    assert first.evidence == {"artifact": "packages/dpkg/dpkg.log.10.gz", "line": 1}
    assert first.attrs["state"] == "archives install"
    assert ev[-1].evidence["artifact"] == "packages/dpkg/dpkg.log"
    assert not any("out-of-order" in e.flags for e in ev)
    c = cover(r, "dpkg")
    assert (c.start, c.end) == (utc(2017, 12, 12, 10, 23, 3), utc(2019, 9, 3, 4, 39, 31))  # CEST at the end
    assert c.reason == "dpkg.log and 10 rotations cover 2017-12-12 .. 2019-09-03"
    up = next(e for e in ev if e.attrs["action"] == "upgrade" and e.attrs["package"] == "libnghttp2-14:amd64")
    assert (up.attrs["old_version"], up.attrs["new_version"]) == ("1.18.1-1", "1.18.1-1+deb9u1")


@pytest.mark.corpus
def test_ubuntu2204_installer_dpkg_log_rotation_only(tmp_path, real_inputs):
    f = real_inputs / "dpkg/ubuntu2204-server/dpkg.log.1"
    b = collect(host_from(tmp_path, real_inputs, {"dpkg/ubuntu2204-server": "/var/log"}), tmp_path)
    r = packages.read(b, node())
    lines = text_lines(f)
    ev = by_kind(r, "package.dpkg-action")
    assert len(ev) == len(lines) == 4445
    assert sum(e.attrs["state"] == "half-configured" for e in ev) == \
        sum(" status half-configured " in line for line in lines) == 703
    assert cover(r, "dpkg").reason == ("1 rotation of dpkg.log cover 2023-05-01 .. 2023-08-30; current dpkg.log "
                                       "not stored (absent: /var/log/dpkg.log not found on the node)")


@pytest.mark.corpus
def test_plaso_dpkg_log_without_final_newline(tmp_path, real_inputs):
    assert not (real_inputs / "dpkg/plaso/dpkg.log").read_bytes().endswith(b"\n")
    b = collect(host_from(tmp_path, real_inputs, {"dpkg/plaso": "/var/log"}), tmp_path)
    r = packages.read(b, node())
    assert [(e.original, e.attrs["action"], e.attrs["package"], e.attrs["old_version"], e.attrs["new_version"],
             e.attrs["state"]) for e in r.events] == [
        ("2009-02-25 11:45:23", "conffile", "/etc/X11/Xsession", None, None, "keep"),
        ("2016-08-03 15:25:53", "startup", None, None, None, "archives install"),
        ("2016-08-06 17:35:39", "install", "base-passwd:amd64", None, "3.5.33", None),
        ("2016-08-09 04:57:14", "status", "base-passwd:amd64", None, "3.5.33", "half-installed")]
    assert r.problems == []


@pytest.mark.corpus
def test_debian9_server_apt_history_and_unattended_upgrades(tmp_path, real_inputs):
    src = real_inputs / "apt/debian9-server-rotated"
    root = host_from(tmp_path, real_inputs, {"apt/debian9-server-rotated": "/var/log/apt",
                                             "apt/debian9-server-rotated/unattended-upgrades":
                                                 "/var/log/unattended-upgrades"})
    b = collect(root, tmp_path)
    assert len(b.find("packages/apt/")) == 11
    assert len(b.find("packages/unattended-upgrades/")) == len(list((src / "unattended-upgrades").glob("*.log*"))) == 15
    r = packages.read(b, node("Europe/Brussels"))
    t = by_kind(r, "package.transaction")
    hist = {f.name: text_lines(f) for f in src.glob("history.log*")}
    assert len(t) == sum(line.startswith("Start-Date: ") for lines in hist.values() for line in lines) == 75
    in8 = [e for e in t if e.evidence["artifact"] == "packages/apt/history.log.8.gz"]
    err8 = [e for e in in8 if e.attrs["error"] == "Sub-process /usr/bin/dpkg returned an error code (1)"]
    assert len(in8) == sum(line.startswith("Start-Date: ") for line in hist["history.log.8.gz"])
    assert len(err8) == sum(line.startswith("Error: ") for line in hist["history.log.8.gz"]) == 11
    assert not any("interrupted" in e.flags for e in t)
    assert (iso_z(in8[0].at), in8[0].original, in8[0].attrs["end"]) == (
        "2018-11-03T05:52:40Z", "2018-11-03  06:52:40", "2018-11-03T05:52:43Z")  # CET, +01:00
    last = t[-1]
    assert (iso_z(last.at), last.attrs["command"], last.attrs["requested_by"]) == (
        "2019-09-03T04:39:31Z", "/usr/bin/unattended-upgrade", None)  # CEST, +02:00
    assert last.attrs["packages"] == [{"name": "libnghttp2-14", "arch": "amd64", "action": "upgrade",
                                       "old": "1.18.1-1", "new": "1.18.1-1+deb9u1", "automatic": False}]
    autos = sum(line.count(", automatic)") for lines in hist.values() for line in lines)
    assert sum(p["automatic"] for e in t for p in e.attrs["packages"]) == autos
    # unattended-upgrades: one run per start of the script, whatever the message order
    uu = {f.name: text_lines(f) for f in (src / "unattended-upgrades").glob("unattended-upgrades.log*")}
    runs = by_kind(r, "package.unattended-run")
    started = sum("INFO Starting unattended upgrades script" in x for lines in uu.values() for x in lines)
    installed = sum(x.endswith("INFO All upgrades installed") for lines in uu.values() for x in lines)
    assert len(runs) == started == 148
    assert sum(e.attrs["result"] == "installed" for e in runs) == installed == 68
    assert sum(e.attrs["result"] == "nothing-to-do" for e in runs) == 148 - 68
    final = runs[-1]
    assert (final.original, iso_z(final.at), final.attrs) == (
        "2019-09-03 06:39:22,348", "2019-09-03T04:39:22.348000Z",
        {"end": "2019-09-03T04:39:31.947000Z", "packages": ["libnghttp2-14", "pdns-backend-mysql"],
         "result": "installed"})
    assert final.evidence == {"artifact": "packages/unattended-upgrades/unattended-upgrades.log", "line": 15}
    assert cover(r, "unattended-upgrades").reason == \
        "unattended-upgrades.log and 6 rotations cover 2019-03-01 .. 2019-09-03"
    assert r.problems == []


@pytest.mark.corpus
@pytest.mark.parametrize("name,expect", [("plaso", 10), ("ubuntu2510-desktop", 131), ("ubuntu2204-server", 4)])
def test_plaso_and_ubuntu_apt_histories(tmp_path, real_inputs, name, expect):
    src = real_inputs / "apt" / name
    b = collect(host_from(tmp_path, real_inputs, {f"apt/{name}": "/var/log/apt"}), tmp_path)
    r = packages.read(b, node())
    t = by_kind(r, "package.transaction")
    lines = [x for f in src.glob("history.log*") for x in text_lines(f)]
    assert len(t) == sum(x.startswith("Start-Date: ") for x in lines) == expect
    assert sum(e.attrs["error"] is not None for e in t) == sum(x.startswith("Error: ") for x in lines)
    assert sum(e.attrs["requested_by"] is not None for e in t) == \
        sum(x.startswith("Requested-By: ") for x in lines)
    assert sum(len(e.attrs["packages"]) for e in t) == sum(
        x.count("), ") + 1 for x in lines if re.match(r"(Install|Upgrade|Remove|Purge|Downgrade|Reinstall|Disappeared): ", x))
    assert r.problems == [] and not any("interrupted" in e.flags for e in t)
    newest, stepped_back = "", 0  # a Start-Date earlier than one before it (the node's zone changed)
    for f in sorted(src.glob("history.log*"), key=lambda f: -int(f.name.split(".")[2]) if f.name.count(".") > 1 else 0):
        for x in text_lines(f):
            if x.startswith("Start-Date: "):
                stamp = " ".join(x.split()[1:])
                stepped_back += stamp < newest
                newest = max(newest, stamp)
    assert sum("out-of-order" in e.flags for e in t) == stepped_back == {"ubuntu2510-desktop": 6}.get(name, 0)
    if name == "plaso":
        assert t[0].original == "2019-07-10  16:38:08" and t[0].at == utc(2019, 7, 10, 16, 38, 8)
        assert t[5].attrs["requested_by"] == "user (1005)"
        assert t[4].attrs["error"] == "Sub-process /usr/bin/dpkg returned an error code (1)"
    if name == "ubuntu2510-desktop":
        ctd = next(e for e in t if {"name": "containerd", "arch": "amd64", "action": "upgrade",
                                    "old": "2.1.3-0ubuntu3", "new": "2.1.3-0ubuntu3.1", "automatic": False}
                   in e.attrs["packages"])
        assert (ctd.original, ctd.attrs["command"]) == (
            "2026-01-29  13:34:31", "aptdaemon role='role-commit-packages' sender=':1.675'")
        assert max(len(e.attrs["command"] or "") for e in t) > 4000  # the multi-kilobyte Commandline


@pytest.mark.corpus
def test_ubuntu2004_unattended_upgrades_log(tmp_path, real_inputs):
    f = real_inputs / "apt/ubuntu2004-cloud/unattended-upgrades/unattended-upgrades.log"
    b = collect(host_from(tmp_path, real_inputs, {"apt/ubuntu2004-cloud/unattended-upgrades":
                                                  "/var/log/unattended-upgrades"}), tmp_path)
    r = packages.read(b, node())
    planned = next(x for x in text_lines(f) if "Packages that will be upgraded: " in x).split(": ", 1)[1].split()
    runs = by_kind(r, "package.unattended-run")
    assert [(e.original, e.attrs["end"], e.attrs["result"]) for e in runs] == [
        ("2022-08-05 04:33:50,746", "2022-08-05T04:44:00.129000Z", "installed"),  # starts at the WARNING line
        ("2022-08-13 07:11:41,596", "2022-08-13T07:11:44.910000Z", "nothing-to-do")]
    assert runs[0].attrs["packages"] == planned and "systemd" in planned and len(planned) == 119
    assert runs[1].attrs["packages"] == []
    assert r.problems == []


# -- python-debian's deb822 as an independent reader of the same stanzas (issue 16 item 7) -----------
@pytest.mark.corpus
def test_every_real_history_log_reads_as_python_debian_reads_it(tmp_path, real_inputs):
    """On every well-formed real history.log, each transaction's Start-Date, Commandline, End-Date and
    package list equal what deb822 (python-debian, the stanza reader Debian's tools use) reads. The
    collector keeps its own reader: deb822 needs a blank line between stanzas, so an apt run killed
    before End-Date and followed by the next run is merged into it and lost (asserted below), and it
    gives no line numbers for the evidence."""
    import io
    from debian.deb822 import Deb822
    from collectors.packages.events import _apt_events
    logs = sorted(real_inputs.rglob("history.log*"))
    assert len(logs) == 17  # 4 hosts, rotations included
    for log in logs:
        data = log.read_bytes()
        text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        theirs = list(Deb822.iter_paragraphs(io.BytesIO(text), use_apt_pkg=False))
        ours = [ev for ev, _end in _apt_events(log, log.name, NodeFacts().tz, None, [])]
        assert len(ours) == len(theirs) > 0, log
        for ev, para in zip(ours, theirs):
            assert ev.original == para["Start-Date"].strip() and ev.attrs["command"] == para.get("Commandline"), log
            assert ev.attrs["end"] == (iso_z(utc(*map(int, re.findall(r"\d+", para["End-Date"]))))
                                       if "End-Date" in para else None), log
            listed = [m[0] for tag in ("Install", "Upgrade", "Downgrade", "Remove", "Purge", "Reinstall")
                      for m in re.findall(r"([^\s:(),]+)(:[^\s:()]+)? \(", para.get(tag, ""))]
            assert sorted(p["name"] for p in ev.attrs["packages"] if p["action"] != "disappeared") == sorted(listed)
    killed = ("Start-Date: 2026-01-01  10:00:00\nCommandline: apt upgrade\n"
              "Start-Date: 2026-01-01  11:00:00\nCommandline: apt install x\nEnd-Date: 2026-01-01  11:00:05\n")
    (tmp_path / "h").write_text(killed)
    assert [p["Commandline"] for p in Deb822.iter_paragraphs(io.StringIO(killed), use_apt_pkg=False)] == ["apt install x"]
    got = [(ev.attrs["command"], ev.flags) for ev, _ in _apt_events(tmp_path / "h", "h", NodeFacts().tz, None, [])]
    assert got == [("apt upgrade", ("interrupted",)), ("apt install x", ())]
