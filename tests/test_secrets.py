"""Secret redaction, proven end to end (issue 6 item 3): secrets planted in a host root, one
``gpu-forensics --verbose run`` into a ``.tar.gz``, and not one byte of any planted secret anywhere in
what the run leaves behind: the archive (compressed and not), every file of the unpacked bundle,
report.html, report.md, analysis.json, and the tool's own stdout, stderr and log records.

Planted where a node really holds them: container env (the OCI ``config.json`` containerd writes, and
runc's ``state.json``), an annotation token, URL credentials (in an annotation, in an allowlisted env
value, in ``--prometheus``), hook and process args (``--token=X``, ``--password X``), and in the logs
kept as evidence (a pod log line with a bearer token and a database URL; a kubelet journal line with
a registry URL), and containerd's registry credentials in ``/etc/containerd/config.toml``. Names are kept and values become ``<redacted hmac:XXXXXXXX>``, the same for the
same value, so two containers sharing a password are still seen to share it. ``--no-redact`` keeps
everything and says so in the manifest.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path

import pytest
from journalbuild import build_journal, export_entry

from forensics import redact
from forensics.ops.cli import main

TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
RUNC = "run/containerd/runc/k8s.io"
MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"
BOOT = "6c7c6013a26343b29e964691ff25d04c"
T0 = datetime(2026, 7, 20, 3, 0, 0, tzinfo=timezone.utc)


def planted(what: str) -> str:
    return f"planted-{what}-{secrets.token_hex(6)}"


@pytest.fixture
def secret():
    """Fresh planted values per test, so a match can only come from this run."""
    names = ("db", "ann", "regurl", "nvurl", "hook", "hookenv", "arg", "bearer", "logurl", "jurl", "prom",
             "registry", "idtoken", "mirror")
    return {n: planted(n) for n in names}


def config(name: str, s: dict) -> dict:
    return {
        "ociVersion": "1.2.0",
        "process": {"args": ["/app", "--password", s["arg"]],
                    "env": ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", f"DB_PASSWORD={s['db']}",
                            f"NVIDIA_MIRROR=https://mirror:{s['nvurl']}@mirror.example/x"]},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                "args": ["nvidia-container-runtime-hook", f"--token={s['hook']}", "prestart"],
                                "env": [f"HOOK_TOKEN={s['hookenv']}"]}]},
        "annotations": {"io.kubernetes.cri.sandbox-name": name, "io.kubernetes.cri.sandbox-namespace": "ml",
                        "io.kubernetes.cri.container-name": "main",
                        "vault.hashicorp.com/agent-token": s["ann"],
                        "example.com/registry": f"https://bob:{s['regurl']}@registry.example/v2"},
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }


def state(cid: str, s: dict) -> dict:
    return {"id": cid, "init_process_pid": 999999, "created": "2026-07-20T02:00:00Z",
            "config": {"cgroups": {"Systemd": True, "devices": []},
                       "labels": [f"bundle=/{TASKS}/{cid}", f"vault.hashicorp.com/agent-token={s['ann']}"],
                       "Hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                               "args": [f"--token={s['hook']}"],
                                               "env": [f"HOOK_TOKEN={s['hookenv']}"]}]}}}


def host(tmp_path: Path, s: dict) -> Path:
    root = tmp_path / "host"
    files = {
        "etc/hostname": "gpu-node-7\n", "etc/timezone": "UTC\n",
        "etc/localtime": Path("/usr/share/zoneinfo/UTC").read_bytes(),
        "proc/stat": f"btime {int(T0.timestamp()) - 86400}\n", "proc/sys/kernel/random/boot_id": BOOT + "\n",
        "etc/containerd/config.toml":
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
            '  BinaryName = "/usr/bin/nvidia-container-runtime"\n  SystemdCgroup = true\n'
            '[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example".auth]\n'
            f'  username = "robot"\n  password = "{s["registry"]}"\n  identitytoken = \'{s["idtoken"]}\'\n'
            '[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]\n'
            f'  endpoint = ["https://pull:{s["mirror"]}@mirror.example"]\n',
        "var/log/pods/ml_trainer-gpu-0_0f3e/main/0.log":
            "2026-07-20T02:59:00Z stdout F GET /v1/jobs Authorization: Bearer " + s["bearer"] + "\n"
            f"2026-07-20T02:59:30Z stdout F connecting to postgres://app:{s['logurl']}@db:5432/jobs\n"
            "2026-07-20T03:00:04Z stderr F Failed to initialize NVML: Unknown Error\n",
    }
    for cid, pod in (("ca11ab1e", "trainer-gpu-0"), ("cb22ab1e", "trainer-gpu-1")):  # one shared password
        files[f"{TASKS}/{cid}/config.json"] = json.dumps(config(pod, s))
        files[f"{RUNC}/{cid}/state.json"] = json.dumps(state(cid, s))
    for path, data in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    at = int(T0.timestamp()) * 1_000_000 + 5_000_000
    build_journal(export_entry({
        "__REALTIME_TIMESTAMP": at, "__MONOTONIC_TIMESTAMP": 86_405_000_000, "_BOOT_ID": BOOT,
        "_MACHINE_ID": MACHINE, "_PID": 2210, "_COMM": "kubelet", "SYSLOG_IDENTIFIER": "kubelet",
        "_SYSTEMD_UNIT": "kubelet.service", "_TRANSPORT": "stdout",
        "MESSAGE": f"Failed to initialize NVML: Unknown Error; image pulled from https://ci:{s['jurl']}@registry.example/x"}),
        root / "var/log/journal" / MACHINE / "system.journal")
    return root


def run(tmp_path: Path, root: Path, s: dict, *extra: str) -> tuple[int, Path, Path]:
    out = tmp_path / f"node{len(list(tmp_path.glob('node*.tar.gz')))}.tar.gz"
    reports = tmp_path / f"reports-{out.name}"
    rc = main(["--verbose", "run", "--root", str(root), "--out", str(out), *extra,
               "--prometheus", f"http://prom:{s['prom']}@127.0.0.1:9/",
               "--html", str(reports / "report.html"), "--markdown", str(reports / "report.md"),
               "--json", str(reports / "analysis.json")])
    return rc, out, reports


def unpack(archive: Path, into: Path) -> Path:
    from forensics.bundle_open import unpack as checked_unpack  # no tarfile filter= on Debian's python 3.11.2
    into.mkdir(parents=True, exist_ok=True)
    return checked_unpack(archive, into, archive)


def every_file(top: Path) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, n), top): Path(d, n).read_bytes()
            for d, _dirs, names in os.walk(top) for n in names}


def h8(value: str) -> str:
    """What this process's collection made of ``value`` (the key is drawn per process)."""
    return redact.redacted(value)


def test_no_byte_of_a_planted_secret_leaves_the_node(tmp_path, secret, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    root = host(tmp_path, secret)

    rc, archive, reports = run(tmp_path, root, secret)

    assert rc in (0, 1) and archive.is_file()
    out = capsys.readouterr()
    places = {"archive (gzip bytes)": archive.read_bytes(),
              "archive (tar stream)": gzip.decompress(archive.read_bytes()),
              "stdout": out.out.encode(), "stderr": out.err.encode(), "log records": caplog.text.encode()}
    bundle = unpack(archive, tmp_path / "unpacked")
    places.update({f"bundle/{rel}": data for rel, data in every_file(bundle).items()})
    places.update({name: (reports / name).read_bytes() for name in ("report.html", "report.md", "analysis.json")})
    assert "gpu-forensics: collecting containers" in out.err  # --verbose did log
    leaks = [(what, name) for name, value in secret.items() for what, data in places.items()
             if value.encode() in data]
    assert leaks == [], "\n".join(map(str, leaks))

    # useful all the same: names kept, and the shared password has the same hash prefix in both containers
    envs = {}
    for cid in ("ca11ab1e", "cb22ab1e"):
        spec = json.loads((bundle / f"containers/k8s.io/{cid}/config.json").read_text())
        envs[cid] = spec["process"]["env"]
        assert spec["annotations"]["vault.hashicorp.com/agent-token"] == h8(secret["ann"])
        assert spec["annotations"]["example.com/registry"].startswith("<redacted hmac:")
        assert spec["hooks"]["prestart"][0]["args"][1] == f"--token={h8(secret['hook'])}"
        assert spec["process"]["args"] == ["/app", "--password", h8(secret["arg"])]
    assert envs["ca11ab1e"] == envs["cb22ab1e"]
    assert f"DB_PASSWORD={h8(secret['db'])}" in envs["ca11ab1e"]
    assert "NVIDIA_MIRROR=https://<redacted>@mirror.example/x" in envs["ca11ab1e"]  # kept, less its credentials
    # logs stay evidence: the lines are kept, less their credentials
    log = (bundle / "podlogs/ml_trainer-gpu-0_0f3e/main/0.log").read_text()
    assert f"Authorization: Bearer {h8(secret['bearer'])}" in log
    assert "postgres://<redacted>@db:5432/jobs" in log and "Failed to initialize NVML" in log
    entries = (bundle / "journal/entries.jsonl").read_text()
    assert "https://<redacted>@registry.example/x" in entries
    toml = (bundle / "runtime/etc/containerd/config.toml").read_text()
    assert f'password = "{h8(secret["registry"])}"' in toml and 'username = "robot"' in toml
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["redaction"]["enabled"] is True
    assert "http://<redacted>@127.0.0.1:9/" in manifest["command_line"]
    analysis = json.loads((reports / "analysis.json").read_text())
    assert any("NVML" in e["summary"] for e in analysis["timeline"])  # still analysed
    assert analysis["exposure"]["systemd_cgroup"] is True  # read from the redacted config.toml


def test_no_redact_keeps_the_values_and_says_so(tmp_path, secret, capsys):
    root = host(tmp_path, secret)

    rc, archive, _reports = run(tmp_path, root, secret, "--no-redact")

    assert rc in (0, 1)
    capsys.readouterr()
    bundle = unpack(archive, tmp_path / "unpacked")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["redaction"]["enabled"] is False
    spec = (bundle / "containers/k8s.io/ca11ab1e/config.json").read_text()
    assert f"DB_PASSWORD={secret['db']}" in spec and secret["ann"] in spec and secret["hook"] in spec
    assert secret["bearer"] in (bundle / "podlogs/ml_trainer-gpu-0_0f3e/main/0.log").read_text()
    assert secret["jurl"] in (bundle / "journal/entries.jsonl").read_text()
    assert secret["prom"] in manifest["command_line"]
    assert secret["registry"] in (bundle / "runtime/etc/containerd/config.toml").read_text()


def test_a_redacted_hash_cannot_be_looked_up_in_a_password_list():
    # the prefix is keyed per collection: equal values match inside one bundle, but "password"
    # does not give the same prefix as its plain SHA-256, nor the same in two collections
    import subprocess
    import sys
    plain = f"<redacted hmac:{hashlib.sha256(b'password').hexdigest()[:8]}>"
    assert redact.redacted("password") == redact.redacted("password") != plain
    code = "from forensics import redact; print(redact.redacted('password'))"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).resolve().parent.parent).stdout.strip() for _ in range(2)}
    assert len(runs) == 2 and plain not in runs and all(r.startswith("<redacted hmac:") for r in runs)
