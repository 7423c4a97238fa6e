"""Times and coverage (issue 14 item 4), each through the real pipeline: a host root under tmp_path,
``forensics.ops.pipeline.collect`` into a bundle, ``forensics.ops.pipeline.analyze`` of that bundle.

The node is in Asia/Karachi (UTC+05:00 all year, no DST), so a zone-less dpkg.log time read as UTC is
5 h off; which of the node's own files names that zone changes from test to test.
"""
from __future__ import annotations

import gzip
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from journalbuild import build_journal, export_entry

from collectors import packages
from forensics.bundle import Bundle, BundleWriter
from forensics.events import NodeFacts
from forensics.findings.exposure_row import Context
from forensics.ops.pipeline import analyze, collect, read_all
from forensics.source import CollectContext

UTC = timezone.utc
ZONE = "Asia/Karachi"
MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"
BOOT_ID = "6c7c6013-a263-43b2-9e96-4691ff25d04c"
BOOTED = datetime(2026, 7, 1, 0, 0, 0, tzinfo=UTC)
#: one apt run at 13:05 Karachi time = 08:05 UTC
DPKG_RUN = ("2026-09-02 13:05:10 startup archives unpack\n"
            "2026-09-02 13:05:11 upgrade libsystemd0:amd64 252.30-1~deb12u2 252.31-1~deb12u2\n"
            "2026-09-02 13:05:12 status installed libsystemd0:amd64 252.31-1~deb12u2\n")
TRUE_WINDOW = {"start": "2026-09-02T08:00:00Z", "end": "2026-09-02T08:10:00Z"}    # the run's real time
FACE_WINDOW = {"start": "2026-09-02T13:00:00Z", "end": "2026-09-02T13:10:00Z"}    # its wall time read as UTC
FAR_WINDOW = {"start": "2026-09-04T08:00:00Z", "end": "2026-09-04T08:10:00Z"}     # two days later: quiet


def node_root(tmp_path: Path, files: dict[str, str | bytes], links: dict[str, str] = {}) -> Path:  # noqa: B006
    """A host root with hostname, boot time and ``files`` (host path -> content), ``links`` (path -> target)."""
    root = tmp_path / "host"
    base = {"/etc/hostname": "gpu-node-7\n", "/proc/stat": f"cpu  1 2 3 4\nbtime {int(BOOTED.timestamp())}\n",
            "/proc/sys/kernel/random/boot_id": BOOT_ID + "\n"}
    for path, data in {**base, **files}.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    for path, target in links.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target)
    return root


def run(tmp_path: Path, root: Path, incidents: list[dict]) -> tuple[Bundle, dict]:
    out = tmp_path / f"bundle{len(list(tmp_path.glob('bundle*')))}"
    path, _digest, _arts = collect(root, out, argv=["gpu-forensics", "collect"], incidents=incidents)
    bundle = Bundle.open(path)
    return bundle, analyze(bundle, full_timeline=True)


def cause(a: dict, window: dict, kind: str = "package-transaction") -> dict:
    [inc] = [i for i in a["incidents"] if i["window"]["start"] == window["start"]]
    return next(c for c in inc["causes"] if c["kind"] == kind)


def dpkg_times(a: dict) -> list[tuple[str, list[str]]]:
    return [(e["at"], e["flags"]) for e in a["timeline"] if e["kind"] == "package.dpkg-action"]


# -- the zone ------------------------------------------------------------------------------------------
def test_localtime_link_out_of_the_root_with_etc_timezone_gives_the_zone(tmp_path):
    # --root /host in a pod: /etc/localtime -> /usr/share/zoneinfo/Asia/Karachi, but the image mounted only
    # /etc and /var/log, so the target is not inside the root; /etc/timezone names the zone too
    root = node_root(tmp_path, {"/etc/timezone": ZONE + "\n", "/var/log/dpkg.log": DPKG_RUN},
                     {"/etc/localtime": f"/usr/share/zoneinfo/{ZONE}"})
    bundle, a = run(tmp_path, root, [TRUE_WINDOW, FACE_WINDOW])
    assert a["timezone"]["name"] == ZONE
    assert a["node_facts"]["tz_source"] == (
        f"/etc/localtime -> /usr/share/zoneinfo/{ZONE} (the target is not inside --root: zone name from the link "
        f"text); no TZif for {ZONE} inside --root: rules by name from the analysing machine's tzdata")
    assert bundle.manifest["node_facts"]["tz_source"] == (
        f"/etc/localtime -> /usr/share/zoneinfo/{ZONE} (the target is not inside --root: zone name from the link "
        f"text); no TZif for {ZONE} inside --root")
    assert bundle.manifest["timezone"] == {"name": ZONE, "utc_offset": "+0500",
                                           "source": bundle.manifest["node_facts"]["tz_source"]}
    assert dpkg_times(a) == [("2026-09-02T08:05:10Z", []), ("2026-09-02T08:05:11Z", []), ("2026-09-02T08:05:12Z", [])]
    c = cause(a, TRUE_WINDOW)
    assert (c["verdict"], c["at"]) == ("confirmed", "2026-09-02T08:05:11Z")
    assert cause(a, FACE_WINDOW)["verdict"] == "excluded"   # 5 h later nothing happened, and dpkg.log says so


def test_etc_timezone_alone_takes_the_rules_from_the_roots_own_zoneinfo(tmp_path):
    tzif = Path(f"/usr/share/zoneinfo/{ZONE}").read_bytes()
    root = node_root(tmp_path, {"/etc/timezone": ZONE + "\n", f"/usr/share/zoneinfo/{ZONE}": tzif,
                                "/var/log/dpkg.log": DPKG_RUN})
    bundle, a = run(tmp_path, root, [TRUE_WINDOW])
    assert a["node_facts"]["tz_source"] == f"/etc/timezone; rules from /usr/share/zoneinfo/{ZONE} inside --root"
    assert bundle.path("node/zoneinfo").read_bytes() == tzif
    assert dpkg_times(a)[1] == ("2026-09-02T08:05:11Z", [])
    assert cause(a, TRUE_WINDOW)["verdict"] == "confirmed"


def test_sysconfig_clock_names_the_zone_on_rhel(tmp_path):
    root = node_root(tmp_path, {"/etc/sysconfig/clock": f'ZONE="{ZONE}"\nUTC=true\n', "/var/log/dpkg.log": DPKG_RUN})
    _bundle, a = run(tmp_path, root, [TRUE_WINDOW])
    assert a["timezone"]["name"] == ZONE
    assert a["node_facts"]["tz_source"].startswith("/etc/sysconfig/clock ZONE=; no TZif for Asia/Karachi inside")
    assert cause(a, TRUE_WINDOW)["verdict"] == "confirmed"


def test_unknown_zone_widens_package_times_and_never_excludes_on_them(tmp_path):
    # no /etc/localtime, no /etc/timezone, no /etc/sysconfig/clock: the node did not say its zone
    root = node_root(tmp_path, {"/var/log/dpkg.log": DPKG_RUN})
    _bundle, a = run(tmp_path, root, [TRUE_WINDOW, FACE_WINDOW, FAR_WINDOW])
    assert a["timezone"]["name"] == "UTC (node zone unknown)" and a["node_facts"]["tz_source"] is None
    # read as UTC, each line says its time is uncertain
    assert dpkg_times(a) == [("2026-09-02T13:05:10Z", ["tz-unknown"]), ("2026-09-02T13:05:11Z", ["tz-unknown"]),
                             ("2026-09-02T13:05:12Z", ["tz-unknown"])]
    gap = "node time zone unknown: dpkg/apt times uncertain by ±14 h"
    [dpkg_gap] = [g for g in a["gaps"] if g["source"] == "dpkg"]
    assert dpkg_gap["uncertain"] == gap and dpkg_gap["reason"].endswith(gap)
    # the real window, 5 h before the face value: the run lies within ±14 h, so inferred, never excluded
    c = cause(a, TRUE_WINDOW)
    assert (c["verdict"], c["at"]) == ("inferred", "2026-09-02T13:05:11Z")
    assert gap in c["gaps"]
    assert [e["line"] for e in c["evidence"]] == [2, 3]
    # at face value the run is inside: still only inferred, its time alone confirms nothing
    assert cause(a, FACE_WINDOW)["verdict"] == "inferred"
    # two days later dpkg.log shows nothing within ±14 h: that is no exclusion either
    far = cause(a, FAR_WINDOW)
    assert far["verdict"] == "undetermined" and gap in far["gaps"]


def test_a_damaged_localtime_is_an_unknown_zone_whatever_etc_timezone_says(tmp_path):
    root = node_root(tmp_path, {"/etc/localtime": b"TZif\x00junk", "/etc/timezone": ZONE + "\n",
                                "/var/log/dpkg.log": DPKG_RUN})
    _bundle, a = run(tmp_path, root, [FACE_WINDOW])
    assert a["timezone"]["name"] == "UTC (node zone unknown)"
    assert a["node_facts"]["tz_source"] == ("/etc/localtime is not a TZif file (/etc/timezone says Asia/Karachi): "
                                            "zone unknown")
    assert cause(a, FACE_WINDOW)["verdict"] == "inferred"


# -- package-log coverage --------------------------------------------------------------------------------
def dpkg_month(day: str) -> str:
    """One upgrade on ``day`` (YYYY-MM-DD) at 10:00 node time (UTC here)."""
    return (f"{day} 10:00:00 startup archives unpack\n"
            f"{day} 10:00:01 upgrade hello:amd64 2.10-2 2.10-3\n"
            f"{day} 10:00:02 status installed hello:amd64 2.10-3\n")


def test_a_missing_middle_rotation_is_a_hole_and_a_window_in_it_is_undetermined(tmp_path):
    utc_tzif = Path("/usr/share/zoneinfo/UTC").read_bytes()
    files = {"/etc/localtime": utc_tzif, "/var/log/dpkg.log": dpkg_month("2026-09-01"),
             "/var/log/dpkg.log.1": dpkg_month("2026-08-01"),
             # dpkg.log.2.gz (July) is gone
             "/var/log/dpkg.log.3.gz": gzip.compress(dpkg_month("2026-06-01").encode())}
    in_hole = {"start": "2026-07-10T00:00:00Z", "end": "2026-07-10T01:00:00Z"}
    covered = {"start": "2026-08-10T00:00:00Z", "end": "2026-08-10T01:00:00Z"}
    _bundle, a = run(tmp_path, node_root(tmp_path, files), [in_hole, covered])
    [g] = [g for g in a["gaps"] if g["source"] == "dpkg"]
    assert g["holes"] == [{"start": "2026-06-01T10:00:02Z", "end": "2026-08-01T10:00:00Z",
                           "reason": "no stored file holds dpkg.log lines from 2026-06-01T10:00:02Z to "
                                     "2026-08-01T10:00:00Z: dpkg.log.2 missing between dpkg.log.3.gz and dpkg.log.1"}]
    c = cause(a, in_hole)
    assert c["verdict"] == "undetermined"
    assert c["gaps"][0].startswith("dpkg has a hole in the window: no stored file holds dpkg.log lines from "
                                   "2026-06-01T10:00:02Z")
    assert cause(a, covered)["verdict"] == "excluded"   # August is held by dpkg.log.1 and dpkg.log


def test_a_jump_longer_than_the_rotation_period_is_a_hole(tmp_path):
    utc_tzif = Path("/usr/share/zoneinfo/UTC").read_bytes()
    files = {"/etc/localtime": utc_tzif, "/var/log/dpkg.log": dpkg_month("2026-09-01"),
             "/var/log/dpkg.log.1": dpkg_month("2026-05-01")}   # four months with no file in between
    window = {"start": "2026-07-10T00:00:00Z", "end": "2026-07-10T01:00:00Z"}
    _bundle, a = run(tmp_path, node_root(tmp_path, files), [window])
    [g] = [g for g in a["gaps"] if g["source"] == "dpkg"]
    assert [(h["start"], h["end"]) for h in g["holes"]] == [("2026-05-01T10:00:02Z", "2026-09-01T10:00:00Z")]
    assert "122 days between dpkg.log.1 and dpkg.log, longer than a monthly rotation" in g["holes"][0]["reason"]
    assert cause(a, window)["verdict"] == "undetermined"


def acquire_packages(root: Path, tmp_path: Path, log) -> Bundle:
    """The packages collector alone, with ``log`` as its progress callback (where logrotate is run)."""
    out = tmp_path / "bundle"
    writer = BundleWriter(out)
    packages.acquire(CollectContext(root=root, writer=writer, log=log))
    writer.finish()
    return Bundle.open(out)


def rotate(log_dir: Path, current: bytes = b"") -> None:
    """What logrotate does with ``monthly, compress, delaycompress, create``: dpkg.log.1 -> dpkg.log.2.gz
    (a new, compressed file), dpkg.log -> dpkg.log.1 (a rename), a new dpkg.log holding ``current``."""
    (log_dir / "dpkg.log.2.gz").write_bytes(gzip.compress((log_dir / "dpkg.log.1").read_bytes()))
    os.unlink(log_dir / "dpkg.log.1")
    os.rename(log_dir / "dpkg.log", log_dir / "dpkg.log.1")
    (log_dir / "dpkg.log").write_bytes(current)


def test_a_rotation_during_collection_is_neither_counted_twice_nor_missed(tmp_path):
    # logrotate (monthly, compress, delaycompress) runs right after dpkg.log was copied:
    # dpkg.log -> dpkg.log.1, dpkg.log.1 -> dpkg.log.2.gz, a new empty dpkg.log
    root = node_root(tmp_path, {"/var/log/dpkg.log": dpkg_month("2026-09-01"),
                                "/var/log/dpkg.log.1": dpkg_month("2026-08-01")})
    log_dir = root / "var/log"
    inode = os.stat(log_dir / "dpkg.log").st_ino
    def logrotate(msg: str) -> None:
        if msg == "packages: copied /var/log/dpkg.log":
            rotate(log_dir)

    bundle = acquire_packages(root, tmp_path, logrotate)
    assert os.stat(log_dir / "dpkg.log.1").st_ino == inode   # a real rename happened mid-acquire
    entry = json.loads(bundle.path("packages/rotation.json").read_text())["dpkg"]
    assert entry["first"] == ["dpkg.log.1", "dpkg.log"] and entry["last"] == ["dpkg.log.2.gz", "dpkg.log.1", "dpkg.log"]
    # dpkg.log was copied before the rename and again as dpkg.log.1: one copy is kept
    assert entry["duplicates"] == {"dpkg.log": "dpkg.log.1"}
    assert entry["renamed"] == [{"from": "dpkg.log", "to": "dpkg.log.1"}]   # same inode, same first bytes
    # dpkg.log.1's old lines moved to dpkg.log.2.gz, which the first listing did not hold: copied at the end
    assert entry["copied_at_end"] == ["dpkg.log.2.gz"] and entry["appeared"] == ["dpkg.log.2.gz"]
    assert entry["vanished"] == [] and entry["late"] == [{"name": "dpkg.log", "size": 0}]
    assert gzip.decompress(bundle.path("packages/dpkg/dpkg.log.2.gz").read_bytes()) == dpkg_month("2026-08-01").encode()
    reading = packages.read(bundle, NodeFacts())
    upgrades = sorted(e.at for e in reading.events if e.attrs.get("action") == "upgrade")
    # August once, September once: the lines dpkg.log.1 held before the rotation were read too
    assert upgrades == [datetime(2026, 8, 1, 10, 0, 1, tzinfo=UTC), datetime(2026, 9, 1, 10, 0, 1, tzinfo=UTC)]
    [cov] = [c for c in reading.coverage if c.source == "dpkg"]
    assert cov.holes == ()
    assert cov.reason.endswith("; rotated during collection: renamed dpkg.log -> dpkg.log.1 (matched by inode and "
                               "first bytes); not counted twice: dpkg.log (= dpkg.log.1); copied at the end: "
                               "dpkg.log.2.gz; appeared: dpkg.log.2.gz")


# -- the RHEL banner -------------------------------------------------------------------------------------
def test_rhel_banner_gives_systemd_239_and_the_dev_char_rule_runs(tmp_path):
    at = BOOTED + timedelta(seconds=2)
    banner = export_entry({
        "__REALTIME_TIMESTAMP": int(at.timestamp()) * 1_000_000, "__MONOTONIC_TIMESTAMP": 2_000_000,
        "_BOOT_ID": BOOT_ID.replace("-", ""), "_MACHINE_ID": MACHINE, "_HOSTNAME": "gpu-node-7",
        "_TRANSPORT": "journal", "_PID": 1, "_UID": 0, "_COMM": "systemd", "SYSLOG_IDENTIFIER": "systemd",
        "_SYSTEMD_UNIT": "init.scope", "CODE_FUNC": "log_execution_mode",
        "MESSAGE": "systemd 239 (239-58.el8) running in system mode. (+PAM +AUDIT +SELINUX +IMA -APPARMOR +SMACK "
                   "+SYSVINIT +UTMP +LIBCRYPTSETUP +GCRYPT +GNUTLS +ACL +XZ +LZ4 +SECCOMP +BLKID +ELFUTILS +KMOD +IDN2 "
                   "-IDN +PCRE2 default-hierarchy=legacy)"})
    root = node_root(tmp_path, {"/etc/localtime": Path("/usr/share/zoneinfo/UTC").read_bytes()})
    build_journal(banner, root / "var/log/journal" / MACHINE / "system.journal")
    path, _d, _a = collect(root, tmp_path / "bundle", argv=["gpu-forensics", "collect"])
    readings = read_all(Bundle.open(path))
    [ev] = [e for e in readings.events if e.kind == "journal.banner"]
    assert (ev.at, ev.attrs["systemd_version"]) == (at, "239-58.el8")
    assert readings.node.systemd_version == "239-58.el8"
    systemd = readings.facts["runtime"]["versions"]["systemd"]
    assert systemd == {"version": "239-58.el8", "basis": "start-up banner at 2026-07-01T00:00:02Z"}
    ctx = Context(readings.facts["runtime"], None, [])   # what exposure.assess computes once per node
    assert ctx.systemd == (239,) and ctx.needs_links and ctx.why_links == "systemd 239"


def test_a_rotation_after_every_copy_is_matched_by_inode_and_by_content(tmp_path):
    # the same logrotate run, once both files were copied: nothing is missing, two names moved
    root = node_root(tmp_path, {"/var/log/dpkg.log": dpkg_month("2026-09-01"),
                                "/var/log/dpkg.log.1": dpkg_month("2026-08-01")})
    log_dir = root / "var/log"

    def logrotate(msg: str) -> None:
        if msg == "packages: copied /var/log/dpkg.log.1":
            rotate(log_dir, b"2026-12-01 09:00:00 startup archives unpack\n")

    bundle = acquire_packages(root, tmp_path, logrotate)
    entry = json.loads(bundle.path("packages/rotation.json").read_text())["dpkg"]
    assert entry["renamed"] == [{"from": "dpkg.log.1", "to": "dpkg.log.2.gz"},   # by content: gzip made a new inode
                                {"from": "dpkg.log", "to": "dpkg.log.1"}]       # by inode
    assert entry["duplicates"] == {} and entry["copied_at_end"] == []
    assert entry["late"] == [{"name": "dpkg.log", "size": 44}]
    reading = packages.read(bundle, NodeFacts())
    upgrades = sorted(e.at for e in reading.events if e.attrs.get("action") == "upgrade")
    assert upgrades == [datetime(2026, 8, 1, 10, 0, 1, tzinfo=UTC), datetime(2026, 9, 1, 10, 0, 1, tzinfo=UTC)]


# -- issue 16 item 5: command-line times (forensics.timeutil.parse_span / parse_when) ----------------
def test_durations_as_systemd_time_spells_them():
    from forensics.timeutil import parse_span
    assert parse_span("2h") == timedelta(hours=2) and parse_span("1h30m") == timedelta(minutes=90)
    assert parse_span("90min") == parse_span("90 minutes") == timedelta(minutes=90)
    assert parse_span("1.5d") == timedelta(hours=36) and parse_span("2 weeks") == timedelta(days=14)
    assert parse_span("2026") is None and parse_span("") is None and parse_span("2h soon") is None


def test_parse_when_keeps_offset_times_exact_and_reads_the_rest_in_the_given_zone():
    from forensics.timeutil import parse_iso, parse_when, tz_by_name
    now = datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
    karachi = tz_by_name(ZONE)
    asked = []

    def zone():
        asked.append(1)
        return karachi
    assert parse_when("2026-07-11T12:34+09:00", now, zone) == (parse_iso("2026-07-11T12:34+09:00"), "offset", None, ())
    assert parse_when("-2h", now, zone)[:2] == (datetime(2026, 12, 1, 14, 0, tzinfo=UTC), "relative")
    assert not asked  # the zone is read only for a zone-less time
    utc, form, wall, flags = parse_when("2026-09-02 13:05", now, zone)
    assert (utc, form, wall, flags) == (datetime(2026, 9, 2, 8, 5, tzinfo=UTC), "local", datetime(2026, 9, 2, 13, 5), ())
    # "yesterday" is the node's yesterday: 16:00 UTC is 21:00 in Karachi, still 2026-12-01 there
    assert parse_when("yesterday", now, zone)[0] == datetime(2026, 11, 29, 19, 0, tzinfo=UTC)
