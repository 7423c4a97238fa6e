"""Corrupted and hostile inputs (issue 6 item 4), each through the real pipeline: a host root under
tmp_path, ``forensics.ops.pipeline.collect`` into a bundle, ``forensics.ops.pipeline.analyze`` of that bundle.

Every bad input must end as an ``error`` / ``truncated`` artifact, a reading problem, or a flagged
event; nothing crashes, and what is good next to it is still read (each test counts it). Real journal
files are cut and corrupted in copies under tmp_path, never in ../shared/real-inputs.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from journalbuild import build_journal, export_entry

from forensics.ops.pipeline import analyze
from forensics.artifact import Status
from forensics.bundle import Bundle
from forensics.ops.pipeline import collect
from reports import render

UTC = timezone.utc
ZONE = "Asia/Seoul"
MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"
BOOT_ID = "6c7c6013-a263-43b2-9e96-4691ff25d04c"  # as /proc/sys/kernel/random/boot_id shows it
BOOTED = datetime(2026, 7, 1, 0, 0, 0, tzinfo=UTC)  # /proc/stat btime
MB = 1 << 20


def node_root(tmp_path: Path, files: dict[str, str | bytes] = {}) -> Path:  # noqa: B006 - never mutated
    """A host root with the node facts (hostname, zone, boot time and ID) and ``files`` (host path ->
    content) on top."""
    root = tmp_path / "host"
    base = {"/etc/hostname": "gpu-node-7\n", "/etc/timezone": ZONE + "\n",
            "/etc/localtime": Path(f"/usr/share/zoneinfo/{ZONE}").read_bytes(),
            "/proc/stat": f"cpu  1 2 3 4\nbtime {int(BOOTED.timestamp())}\n",
            "/proc/sys/kernel/random/boot_id": BOOT_ID + "\n"}
    for path, data in {**base, **files}.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def run(tmp_path: Path, root: Path, **kw) -> tuple[Bundle, dict]:
    """Collect ``root`` into a new bundle and analyse it; the analysis goes through every renderer."""
    out = tmp_path / f"bundle{len(list(tmp_path.glob('bundle*')))}"
    path, _digest, _arts = collect(root, out, argv=["gpu-forensics", "collect"], **kw)
    bundle = Bundle.open(path)
    a = analyze(bundle, full_timeline=True)
    render.html(a), render.markdown(a), render.to_json(a)  # the reports survive it too
    return bundle, a


def records(bundle: Bundle) -> dict[str, object]:
    """Manifest records by host source path (the last record wins)."""
    return {a.source: a for a in bundle.artifacts()}


def events(a: dict, kind: str) -> list[dict]:
    return [e for e in a["timeline"] if e["kind"] == kind]


def problems(a: dict, artifact: str) -> list[str]:
    return [p["message"] for p in a["problems"] if p.get("artifact") == artifact]


# -- journal files cut or corrupted ------------------------------------------------------------------
KDE = "journal/kde-kjournald/83fc99b40aab448f8004215d83cb3f66"
ARCH = "journal/fluent-plugin-systemd/test.journal"


@pytest.mark.corpus
def test_cut_and_corrupted_real_journal_files_next_to_good_ones(tmp_path, real_inputs):
    jdir = tmp_path / "journal"
    jdir.mkdir()
    for f in (real_inputs / KDE).iterdir():  # the good ones: one real journal directory, 3 boots, 1 reload
        shutil.copyfile(f, jdir / f.name)
    data = (real_inputs / ARCH).read_bytes()
    rng = random.Random(6)
    cuts = [0, 7, 200] + sorted(rng.randrange(300, len(data)) for _ in range(4))  # in the header, then anywhere
    for off in cuts:
        (jdir / f"cut-{off}.journal").write_bytes(data[:off])
    for i in range(3):  # bytes flipped past the header: the file opens, some objects are damaged
        b = bytearray(data)
        for _ in range(400 * (i + 1)):
            b[rng.randrange(4096, len(b))] ^= 0xFF
        (jdir / f"flipped-{i}.journal").write_bytes(bytes(b))
    root = node_root(tmp_path)

    bundle, a = run(tmp_path, root, options={"journal_dirs": [str(jdir)]})

    files = {Path(f["source"]).name: f for f in json.loads(bundle.path("journal/files.json").read_text())}
    recs = records(bundle)
    for off in cuts:
        f = files[f"cut-{off}.journal"]
        assert not f["opened"] and f["error"], f  # each cut file is an error artifact with its reason
        rec = recs[f["source"]]
        assert rec.status is Status.ERROR and rec.message == f["error"]
        assert "truncated" in rec.message or "shorter than a journal file header" in rec.message or off < 16
    for i in range(3):  # a corrupted file is either refused with a reason, or read as far as it goes
        f = files[f"flipped-{i}.journal"]
        assert f["opened"] or (f["error"] and recs[f["source"]].status is Status.ERROR)
    assert all(f["opened"] for name, f in files.items() if not name.startswith(("cut-", "flipped-")))
    # the good files are still read: the Raspberry Pi's one daemon-reload and its three boots
    [reload] = events(a, "journal.reload")
    assert reload["at"] == "2021-03-13T15:25:48.625245Z" and reload["attrs"]["wording"] == "Reloading."
    kde = {e["attrs"]["boot_id"] for e in events(a, "journal.boot") if e["at"].startswith("2021-")}
    assert len(kde) == 3
    assert any("was not read" in m for m in problems(a, "journal/files.json"))


# -- package logs: not gzip, empty, not UTF-8, one 10 MB line, out of order ---------------------------------
def dpkg(at: str, rest: str) -> str:
    return f"{at} {rest}\n"


def test_package_logs_with_bad_rotations_bytes_and_a_10mb_line(tmp_path):
    good = [dpkg("2026-07-20 03:00:00", "startup archives unpack"),
            dpkg("2026-07-20 03:00:01", "upgrade containerd:amd64 1.7.12-1 1.7.20-1"),
            dpkg("2026-07-20 03:00:02", "status half-configured containerd:amd64 1.7.20-1")]
    current = (good[0] + good[1]).encode() \
        + b"2026-07-20 03:00:01 status unpacked caf\xe9-\xff:amd64 1.0\n" \
        + b"2026-07-20 03:00:01 " + b"x" * (10 * MB) + b"\n" \
        + good[2].encode()
    history = ("Start-Date: 2026-07-20  03:00:00\nCommandline: apt-get -y upgrade\n"
               "Upgrade: containerd:amd64 (1.7.12-1, 1.7.20-1)\nEnd-Date: 2026-07-20  03:00:05\n")
    root = node_root(tmp_path, {
        "/var/log/dpkg.log": current,
        "/var/log/dpkg.log.1": b"",                                     # zero-length rotation
        "/var/log/dpkg.log.2.gz": good[0],                              # named .gz, not gzip
        "/var/log/dpkg.log.3.gz": gzip.compress(good[0].encode())[:-9],  # gzip cut short
        "/var/log/apt/history.log": history,
        "/var/log/apt/history.log.1.gz": b"",                           # zero-length .gz
        "/var/log/apt/history.log.2.gz": b"Start-Date: not gzip at all\n",
    })
    inc = {"start": "2026-07-19T17:00:00Z", "end": "2026-07-19T19:00:00Z", "label": "july"}  # 02:00-04:00 KST

    bundle, a = run(tmp_path, root, incidents=[inc])

    assert all(records(bundle)[f"/var/log/{n}"].status is Status.COLLECTED
               for n in ("dpkg.log", "dpkg.log.1", "dpkg.log.2.gz", "apt/history.log.1.gz"))
    assert problems(a, "packages/dpkg/dpkg.log.2.gz") == ["named .gz but not gzip data; not read"]
    assert problems(a, "packages/apt/history.log.2.gz") == ["named .gz but not gzip data; not read"]
    assert problems(a, "packages/dpkg/dpkg.log.1") == ["empty file: no lines"]
    assert problems(a, "packages/apt/history.log.1.gz") == ["empty file: no lines"]
    assert any(m.startswith("read stopped at line") for m in problems(a, "packages/dpkg/dpkg.log.3.gz"))
    cur = problems(a, "packages/dpkg/dpkg.log")
    assert f"line of {20 + 10 * MB + 1} bytes (over {MB}) not read" in cur
    assert "1 lines hold bytes that are not UTF-8 (replaced by U+FFFD)" in cur
    # the rest is read: 4 dated lines of the current dpkg.log (the non-UTF-8 one with U+FFFD), one apt stanza
    actions = [e for e in events(a, "package.dpkg-action") if e["evidence"]["artifact"] == "packages/dpkg/dpkg.log"]
    assert [e["attrs"]["action"] for e in actions] == ["startup", "upgrade", "status", "status"]
    assert actions[2]["attrs"]["package"] == "caf\N{REPLACEMENT CHARACTER}-\N{REPLACEMENT CHARACTER}:amd64"
    [txn] = events(a, "package.transaction")
    assert txn["attrs"]["command"] == "apt-get -y upgrade"
    [i1] = a["incidents"]
    verdicts = {c["kind"]: c["verdict"] for c in i1["causes"]}
    assert verdicts["package-transaction"] == "confirmed"


def test_dpkg_lines_out_of_order_are_flagged(tmp_path):
    log = "".join([dpkg("2026-07-20 03:00:00", "startup archives unpack"),
                   dpkg("2026-07-20 03:10:00", "upgrade runc:amd64 1.1.12-1 1.1.13-1"),
                   dpkg("2026-07-20 03:05:00", "status installed runc:amd64 1.1.13-1"),  # clock stepped back
                   dpkg("2026-07-20 03:11:00", "status installed runc:amd64 1.1.13-1")])
    bundle, a = run(tmp_path, node_root(tmp_path, {"/var/log/dpkg.log": log}))
    flags = [(e["original"], e["flags"]) for e in events(a, "package.dpkg-action")]
    assert flags == [("2026-07-20 03:00:00", []), ("2026-07-20 03:05:00", ["out-of-order"]),
                     ("2026-07-20 03:10:00", []), ("2026-07-20 03:11:00", [])]


# -- a pod log with bytes that are not UTF-8 and one 10 MB line ---------------------------------------------
def test_pod_log_with_bad_bytes_and_a_10mb_line(tmp_path):
    log = (b"2026-07-20T03:00:00.000000001Z stdout F training step 1\n"
           b"2026-07-20T03:00:01Z stdout F loss \xff\xfe nan\n"
           b"2026-07-20T03:00:02Z stderr F " + b"A" * (10 * MB) + b"\n"
           b"2026-07-20T03:00:03Z stdout F step 2 \xc3\x28 done\n"
           b"2026-07-20T03:00:04Z stderr F Failed to initialize NVML: Unknown Error\n")
    root = node_root(tmp_path, {"/var/log/pods/ml_trainer-gpu-0_0f3e/main/0.log": log})

    bundle, a = run(tmp_path, root)

    rec = records(bundle)["/var/log/pods/ml_trainer-gpu-0_0f3e/main/0.log"]
    assert rec.status is Status.TRUNCATED and rec.size < 2 * MB  # a tail, from the first whole line
    [err] = events(a, "container.log-error")
    [healthy] = events(a, "container.log-healthy")
    assert err["at"] == "2026-07-20T03:00:04Z" and err["attrs"]["truncated"] is True
    assert healthy["at"] == "2026-07-20T03:00:03Z"
    assert healthy["attrs"]["message"] == "step 2 \N{REPLACEMENT CHARACTER}( done"
    [inc] = a["incidents"]  # the rest is analysed: the pod's own log opens an incident
    assert inc["origin"] == "containers" and inc["window"]["start"] == "2026-07-20T03:00:03Z"
    assert inc["window"]["end"] == "2026-07-20T03:00:04Z"


# -- malformed JSON, TOML and YAML ------------------------------------------------------------------------
TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
RUNC = "/run/containerd/runc/k8s.io"


def spec(name: str) -> dict:
    return {"ociVersion": "1.2.0",
            "process": {"args": ["/app"], "env": ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"]},
            "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["hook", "prestart"]}]},
            "annotations": {"io.kubernetes.cri.sandbox-name": name, "io.kubernetes.cri.sandbox-namespace": "ml",
                            "io.kubernetes.cri.container-name": "main"},
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}


def state(cid: str) -> dict:
    return {"id": cid, "init_process_pid": 999999, "created": "2026-07-20T03:00:00.123456789Z",
            "config": {"cgroups": {"Systemd": True, "devices": []}, "labels": [f"bundle={TASKS}/{cid}"]}}


def test_malformed_json_toml_and_yaml(tmp_path):
    files = {
        f"{TASKS}/c1/config.json": '{"ociVersion": "1.2.0", "process": {"env": ["A=',  # cut short
        f"{RUNC}/c1/state.json": json.dumps(state("c1")),
        f"{TASKS}/c2/config.json": json.dumps(spec("trainer-2")),
        f"{RUNC}/c2/state.json": b"{'id': 'c2', \xff}",                               # not JSON, not UTF-8
        f"{TASKS}/c3/config.json": json.dumps(spec("trainer-3")),
        f"{RUNC}/c3/state.json": json.dumps(state("c3")),
        f"{TASKS}/c4/config.json": "[" * 100_000 + "]" * 100_000,                      # nested past any parser
        "/etc/containerd/config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\nsystemd_cgroup = tru\n',
        "/etc/nvidia-container-runtime/config.toml": '[nvidia-container-runtime]\nmode = "legacy"\n',
        "/etc/cdi/nvidia.yaml": "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: [\n  - name: 0\n    x: {\n",
        "/etc/cdi/deep.json": "[" * 50_000,
        "/proc/devices": "Character devices:\n195 nvidia\n508 nvidia-uvm\n",
    }
    bundle, a = run(tmp_path, node_root(tmp_path, files))

    recs = records(bundle)
    for source in (f"{TASKS}/c1/config.json", f"{RUNC}/c2/state.json", f"{TASKS}/c4/config.json"):
        assert recs[source].status is Status.ERROR and recs[source].message, source
    assert "not valid JSON" in recs[f"{TASKS}/c1/config.json"].message
    assert any("not valid TOML" in m for m in problems(a, "runtime/etc/containerd/config.toml"))
    assert any("cannot be parsed" in m for m in problems(a, "runtime/etc/cdi/nvidia.yaml"))
    assert any("cannot be parsed" in m for m in problems(a, "runtime/etc/cdi/deep.json"))
    # the rest is analysed: every container still has a record, the good toolkit config and /proc/devices count
    assert sorted(c["id"] for c in a["exposure"]["containers"]) == ["c1", "c2", "c3", "c4"]
    assert sorted(e["attrs"]["id"] for e in events(a, "container.created")) == ["c1", "c3"]
    assert a["exposure"]["nvidia_runtime_mode"] == "legacy"
    runtime = json.loads(bundle.path("runtime/facts.json").read_text())
    assert runtime["containerd_files"][0]["source"] == "/etc/containerd/config.toml"


def test_valid_toml_with_values_of_the_wrong_type(tmp_path):
    # containerd would refuse this file; the collector must still take everything else
    files = {"/etc/containerd/config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncdi_spec_dirs = 5\n'
                                            '[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "nvidia"\n',
             "/etc/nvidia-container-runtime/config.toml": '[nvidia-container-runtime]\nmode = 5\n'
                                                          '[nvidia-container-runtime.modes.cdi]\nspec-dirs = 7\n',
             "/etc/cdi/nvidia.yaml": "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: 5\ncontainerEdits: [1]\n",
             "/proc/devices": "Character devices:\n195 nvidia\n"}
    bundle, a = run(tmp_path, node_root(tmp_path, files))

    assert not [x for x in bundle.artifacts() if x.source.startswith("collector:")]  # no collector crashed
    assert records(bundle)["runtime_config"].status is Status.COLLECTED
    assert a["exposure"]["nvidia_runtime_mode"] == "auto"  # mode = 5 counts as not set
    assert any("missing devices" in m for m in problems(a, "runtime/etc/cdi/nvidia.yaml"))


def test_node_facts_out_of_range(tmp_path):
    root = node_root(tmp_path, {"/proc/stat": "btime 99999999999999999999\n", "/etc/localtime": b"TZif\x00junk"})
    bundle, a = run(tmp_path, root)
    assert not [x for x in bundle.artifacts() if x.source.startswith("collector:")]
    assert bundle.manifest["boot_time"] is None and a["node"] == "gpu-node-7"
    assert a["timezone"]["name"] == "UTC (node zone unknown)"  # never the analysing machine's zone


# -- clock jumps in the journal ------------------------------------------------------------------------
def usec(at: datetime) -> int:
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def pid1(at: datetime, message: str, seq_offset_s: float) -> bytes:
    return export_entry({
        "__REALTIME_TIMESTAMP": usec(at), "__MONOTONIC_TIMESTAMP": int(seq_offset_s * 1_000_000),
        "_BOOT_ID": BOOT_ID.replace("-", ""), "_MACHINE_ID": MACHINE, "_HOSTNAME": "gpu-node-7",
        "_TRANSPORT": "journal", "_PID": 1, "_UID": 0, "_COMM": "systemd", "SYSLOG_IDENTIFIER": "systemd",
        "_SYSTEMD_UNIT": "init.scope", "CODE_FUNC": "invoke_main_loop", "MESSAGE": message})


def test_clock_jumps_before_boot_in_the_future_and_duplicate_times(tmp_path):
    before = BOOTED - timedelta(days=400)           # the RTC was a year behind until NTP stepped it
    same = BOOTED + timedelta(days=2, hours=3)       # two reloads logged with one __REALTIME_TIMESTAMP
    future = datetime(2099, 1, 1, tzinfo=UTC)        # then the clock leapt ahead
    entries = [pid1(before, "systemd 252.30-1~deb12u2 running in system mode (+PAM)", 1),
               pid1(before + timedelta(seconds=5), "Reloading.", 6),
               pid1(BOOTED + timedelta(seconds=30), "Started kubelet.service.", 40),
               pid1(same, "Reloading.", 180_000),
               pid1(same, "Reloading.", 180_001),
               pid1(same + timedelta(hours=1), "Reloading.", 183_600),
               pid1(future, "Reloading.", 190_000)]
    root = node_root(tmp_path)
    build_journal(b"".join(entries), root / "var/log/journal" / MACHINE / "system.journal")

    bundle, a = run(tmp_path, root, incidents=[{"start": "2026-07-03T02:00:00Z", "end": "2026-07-03T05:00:00Z"}])

    reloads = [(e["at"], e["flags"]) for e in events(a, "journal.reload")]
    assert reloads == [
        ("2025-05-27T00:00:05Z", ["before-boot"]),
        ("2026-07-03T03:00:00Z", ["duplicate-time"]),
        ("2026-07-03T03:00:00Z", ["duplicate-time"]),
        ("2026-07-03T04:00:00Z", []),
        ("2099-01-01T00:00:00Z", ["after-collection"]),
    ]
    [boot] = events(a, "journal.boot")
    assert boot["flags"] == ["before-boot"]  # dated at the boot's first entry, before the jump
    [banner] = events(a, "journal.banner")
    assert banner["flags"] == ["before-boot"]
    # nothing else is flagged, and the flags reach the report's timeline
    assert all(not e["flags"] for e in a["timeline"] if e["source"] != "journal")
    html = render.html(a)
    assert "before-boot" in html and "duplicate-time" in html
    [i1] = a["incidents"]
    assert {c["kind"]: c["verdict"] for c in i1["causes"]}["daemon-reload"] == "confirmed"
