"""Runtime configuration files are stored redacted (issue 27, "Hostile round two"): the redaction
policy's ``config`` rule (forensics/redact_config.py) on every path that copies a config file into the
bundle, proven on a real node tree.

A matrix root (tests/nodegen.py: containerd with CDI, the toolkit's config, a CDI spec) gets, where a
node really keeps them, secrets in each format: TOML (containerd registry auth, mirror and header, the
toolkit's ``environment``, a CRI-O drop-in's ``default_env``), JSON (Docker's daemon.json mirror, proxy
and runtime args; an OCI hook's Bearer arg and env; a CDI spec's env and hook args), YAML (a CDI spec,
the device plugin's settings.yaml, the KubeletConfiguration), env files (the GPU Operator's driver-ready,
/etc/default/kubelet, fabricmanager.cfg) and unit files (kubelet.service, a container scope's transient
drop-in), commented-out ones included. One ``run`` into a ``.tar.gz``: not one byte of any planted
value in the archive (gzip and tar stream), any file of the unpacked bundle, report.html, report.md,
analysis.json or the tool's output. Every stored copy still parses in its format, its manifest record
says how many values were replaced, and the facts the collectors read from the redacted bundle are the
ones they read from a ``--no-redact`` collection of the same root (leaves that held a planted value
aside, which read as redacted values).

A property test plants random secret values under secret keys in random TOML, JSON, YAML and env
documents: the redacted copy holds none of them and still parses to the same non-secret values.
"""
from __future__ import annotations

import gzip
import json
import re
import secrets
import shutil
import string
import tomllib

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
import tomli_w

import nodegen as N
from collectors import kubelet, runtime_config
from collectors.kubelet import config as kc
from forensics import redact
from forensics.bundle import Bundle
from forensics.events import NodeFacts
from forensics.ops.cli import main
from forensics.redact_config import redact_config
from test_secrets import every_file, unpack

ROOT_ID = "cri-v1-nvdp-cdi-debian12"
NAMES = ("ctd_password", "ctd_mirror", "ctd_header", "ctd_comment", "tk_hf", "crio_proxy", "crio_aws", "hook_bearer",
         "hook_hf", "docker_arg", "docker_mirror", "docker_proxy", "cdi_aws", "cdi_tok", "cdij_pw", "plugin_pw",
         "plugin_hf", "ready_hf", "unit_hf", "unit_tok", "env_tok", "env_aws", "env_pass", "kcfg_bearer", "kcfg_pw",
         "kcfg_comment", "fm_tok", "scope_hf")


def _w(root, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def plant(s: dict):
    """The ``files`` hook of a nodegen root: every config below, each holding some of ``s``'s values."""
    def files(root, _t, _names):
        ctd = root / "etc/containerd/config.toml"
        ctd.write_text(ctd.read_text() + (
            '[plugins."io.containerd.grpc.v1.cri".registry.configs."nvcr.io".auth]\n'
            f'  username = "$oauthtoken"\n  password = "{s["ctd_password"]}"\n'
            '[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]\n'
            f'  endpoint = ["https://pull:{s["ctd_mirror"]}@mirror.example"]\n'
            '[plugins."io.containerd.grpc.v1.cri".registry.headers]\n'
            f'  Authorization = ["Bearer {s["ctd_header"]}"]\n'
            f'# old mirror: https://pull:{s["ctd_comment"]}@old-mirror.example\n'))
        tk = root / "etc/nvidia-container-runtime/config.toml"
        tk.write_text(tk.read_text().replace("environment = []", f'environment = ["HF_TOKEN={s["tk_hf"]}"]'))
        _w(root, "etc/crio/crio.conf.d/10-proxy.conf",
           '[crio.runtime]\ncgroup_manager = "cgroupfs"\n'
           f'default_env = ["HTTPS_PROXY=http://ops:{s["crio_proxy"]}@proxy:3128", "AWS_SECRET_ACCESS_KEY={s["crio_aws"]}"]\n'
           '[crio.image]\nglobal_auth_file = "/etc/crio/auth.json"\n')
        _w(root, "etc/containers/oci/hooks.d/oci-nvidia-hook.json", json.dumps(
            {"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-runtime-hook",
                                          "args": ["nvidia-container-runtime-hook", "prestart", "--header",
                                                   f"Authorization: Bearer {s['hook_bearer']}"],
                                          "env": [f"HF_TOKEN={s['hook_hf']}", "NVIDIA_VISIBLE_DEVICES=all"]},
             "when": {"always": True}, "stages": ["prestart"]}, indent=2))
        _w(root, "etc/docker/daemon.json", json.dumps(
            {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": ["--token", s["docker_arg"]]}},
             "default-runtime": "nvidia", "exec-opts": ["native.cgroupdriver=systemd"], "features": {"cdi": True},
             "registry-mirrors": [f"https://mirror:{s['docker_mirror']}@mirror.example"],
             "proxies": {"http-proxy": f"http://ops:{s['docker_proxy']}@proxy:3128"}}, indent=2))
        _w(root, "etc/cdi/extra.yaml",
           "cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices:\n- name: \"1\"\n  containerEdits:\n"
           "    deviceNodes:\n    - path: /dev/nvidia1\ncontainerEdits:\n"
           f"  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n  - AWS_SECRET_ACCESS_KEY={s['cdi_aws']}\n"
           "  hooks:\n  - hookName: createContainer\n    path: /usr/bin/nvidia-cdi-hook\n"
           f"    args: [nvidia-cdi-hook, update-ldcache, --token, {s['cdi_tok']}]\n")
        _w(root, "etc/cdi/extra.json", json.dumps(
            {"cdiVersion": "0.6.0", "kind": "example.com/nic", "devices": [{"name": "a", "containerEdits": {
                "deviceNodes": [{"path": "/dev/infiniband/uverbs0"}]}}],
             "containerEdits": {"env": [f"DB_PASSWORD={s['cdij_pw']}"]}}))
        _w(root, "etc/nvidia-k8s-device-plugin/settings.yaml",
           "version: v1\nflags:\n  migStrategy: none\n  plugin:\n    passDeviceSpecs: true\n"
           f"    deviceListStrategy: [envvar, cdi-cri]\nregistry:\n  password: {s['plugin_pw']}\n"
           f"env:\n- HF_TOKEN={s['plugin_hf']}\n")
        _w(root, "run/nvidia/validations/driver-ready",
           f"IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\nHF_TOKEN={s['ready_hf']}\n")
        _w(root, "etc/systemd/system/kubelet.service",
           "[Unit]\nDescription=kubelet\n[Service]\n"
           f'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml" "HF_TOKEN={s["unit_hf"]}"\n'
           "EnvironmentFile=-/etc/default/kubelet\n"
           "ExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS $KUBELET_EXTRA_ARGS --bootstrap-token \\\n"
           f"    {s['unit_tok']}\n")
        _w(root, "etc/default/kubelet",
           f'KUBELET_EXTRA_ARGS="--node-labels=gpu=true --cgroup-driver=systemd --token={s["env_tok"]}"\n'
           f"export AWS_SECRET_ACCESS_KEY={s['env_aws']}\nDB_PASS='{s['env_pass']}'\n")
        _w(root, "var/lib/kubelet/config.yaml",
           "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
           "cpuManagerPolicy: static\ntopologyManagerPolicy: single-numa-node\nstaticPodURLHeader:\n"
           f"  Authorization: [\"Bearer {s['kcfg_bearer']}\"]\npassword: {s['kcfg_pw']}\n"
           f"# bootstrap: --token {s['kcfg_comment']}\n")
        _w(root, "usr/share/nvidia/nvswitch/fabricmanager.cfg",
           f"LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\nIMEX_AUTH_TOKEN={s['fm_tok']}\n")
        for d in (root / "run/systemd/transient").glob("*.scope.d"):
            (d / "60-env.conf").write_text(f"[Scope]\nEnvironment=HF_TOKEN={s['scope_hf']}\n")
    return files


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """``(secrets, {"red"|"raw": (bundle dir, reports dir, stdout+stderr)})``: one root, collected redacted
    and with ``--no-redact``."""
    base = tmp_path_factory.mktemp("cfgred")
    s = {n: f"planted-{n.replace('_', '-')}-{secrets.token_hex(6)}" for n in NAMES}
    N.make_root(base / "root", {**N.BY_ID[ROOT_ID], "files": plant(s)})
    out = {}
    for kind, extra in (("red", ()), ("raw", ("--no-redact",))):
        archive, reports = base / f"{kind}.tar.gz", base / f"reports-{kind}"
        rc = main(["run", "--root", str(base / "root"), "--out", str(archive), *extra, "--html",
                   str(reports / "report.html"), "--markdown", str(reports / "report.md"), "--json",
                   str(reports / "analysis.json")])
        assert rc in (0, 1)
        out[kind] = (archive, unpack(archive, base / f"unpacked-{kind}"), reports)
    yield s, out
    shutil.rmtree(base, ignore_errors=True)


def test_no_planted_config_secret_reaches_the_bundle_or_the_reports(collected, capsys):
    s, out = collected
    archive, bundle, reports = out["red"]
    places = {"archive (gzip bytes)": archive.read_bytes(), "archive (tar stream)": gzip.decompress(archive.read_bytes()),
              "output": (lambda c: (c.out + c.err).encode())(capsys.readouterr())}
    places.update({f"bundle/{rel}": data for rel, data in every_file(bundle).items()})
    places.update({name: (reports / name).read_bytes() for name in ("report.html", "report.md", "analysis.json")})
    assert [(n, w) for n, v in s.items() for w, data in places.items() if v.encode() in data] == []
    # the --no-redact bundle holds every one of them: each was planted where a collector reads
    raw = b"".join(every_file(out["raw"][1]).values())
    assert [n for n, v in s.items() if v.encode() not in raw] == []


#: stored copy -> (parser, planted values it held, values the manifest must count at least)
STORED = {
    "runtime/etc/containerd/config.toml": (tomllib.loads, 3),
    "runtime/etc/nvidia-container-runtime/config.toml": (tomllib.loads, 1),
    "runtime/etc/crio/crio.conf.d/10-proxy.conf": (tomllib.loads, 2),
    "runtime/etc/containers/oci/hooks.d/oci-nvidia-hook.json": (json.loads, 2),
    "runtime/etc/docker/daemon.json": (json.loads, 3),
    "runtime/etc/cdi/extra.yaml": (yaml.safe_load, 2),
    "runtime/etc/cdi/extra.json": (json.loads, 1),
    "runtime/etc/nvidia-k8s-device-plugin/settings.yaml": (yaml.safe_load, 2),
    "runtime/run/nvidia/validations/driver-ready": (kc.env_file, 1),
    "kubelet/files/etc/systemd/system/kubelet.service": (lambda t: kc.unit_settings([t]), 2),
    "kubelet/files/etc/default/kubelet": (kc.env_file, 3),
    "kubelet/files/var/lib/kubelet/config.yaml": (yaml.safe_load, 2),
    "nvidia_host/fabricmanager/fabricmanager.cfg": (kc.env_file, 1),
}


def test_each_stored_config_still_parses_and_its_record_counts_what_was_replaced(collected):
    _s, out = collected
    bundle = out["red"][1]
    records = {a.path: a for a in Bundle.open(bundle).artifacts()}
    for rel, (parse, least) in STORED.items():
        parse((bundle / rel).read_text())  # raises when the copy no longer parses
        a = records[rel]
        [note] = [n for n in a.notes if n.startswith("config rule (")]
        assert a.method == "copy-redacted" and int(note.split("): ")[1].split()[0]) >= least, (rel, a.notes)
    scopes = [p for p in records if p and "/systemd/" in p and p.endswith("60-env.conf")]
    assert scopes and all(records[p].method == "copy-redacted" for p in scopes)
    raw = {a.path: a for a in Bundle.open(out["raw"][1]).artifacts()}
    assert all(raw[rel].method == "copy" for rel in STORED if rel in raw)


def _same_facts(raw, red, planted: list[str], where: str = "") -> list[str]:
    """Where ``red`` differs from ``raw``, other than a leaf that held a planted value and now holds a
    redacted one."""
    if isinstance(raw, dict) and isinstance(red, dict):
        if set(raw) != set(red):
            return [f"{where}: keys {sorted(map(str, set(raw) ^ set(red)))}"]
        return [d for k in raw for d in _same_facts(raw[k], red[k], planted, f"{where}/{k}")]
    if isinstance(raw, list) and isinstance(red, list) and len(raw) == len(red):
        return [d for i, (a, b) in enumerate(zip(raw, red)) for d in _same_facts(a, b, planted, f"{where}[{i}]")]
    if isinstance(raw, str) and any(p in raw for p in planted):
        return [] if isinstance(red, str) and "<redacted" in red and not any(p in red for p in planted) else \
            [f"{where}: {red!r}"]
    return [] if raw == red else [f"{where}: {raw!r} != {red!r}"]


def test_the_facts_read_from_redacted_configs_are_the_facts_read_from_the_originals(collected):
    s, out = collected
    facts = {}
    for kind in ("raw", "red"):
        b = Bundle.open(out[kind][1])
        facts[kind] = {"runtime": runtime_config.read(b, NodeFacts()).facts, "kubelet": kubelet.read(b, NodeFacts()).facts}
    assert _same_facts(facts["raw"], facts["red"], list(s.values())) == []
    rt, kl = facts["red"]["runtime"]["runtime"], facts["red"]["kubelet"]["kubelet"]
    # and they are what the planted files say
    assert rt["systemd_cgroup"] is True and rt["enable_cdi"] is True
    assert rt["nvidia_runtime_mode"] == "legacy"
    assert rt["stack"]["docker"]["cgroup_driver"] == "systemd" and rt["stack"]["docker"]["cdi"] is True
    assert rt["stack"]["docker"]["default_runtime"] == "nvidia"
    assert rt["stack"]["crio"]["cgroup_manager"] == "cgroupfs"
    assert rt["stack"]["bottlerocket_plugin"] == {"pass_device_specs": True, "device_list_strategy": ["envvar", "cdi-cri"]}
    assert rt["stack"]["operator"]["driver_ready"]["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert rt["stack"]["operator"]["driver_ready"]["HF_TOKEN"] == redact.redacted(s["ready_hf"])
    assert any(h["path"] == "/usr/bin/nvidia-container-runtime-hook" for h in rt["oci_hooks"])
    assert {sp.get("kind") for sp in rt["cdi"]["specs"]} >= {"nvidia.com/gpu", "example.com/gpu", "example.com/nic"}
    assert kl["config"]["cpuManagerPolicy"]["value"] == "static"
    assert kl["config"]["topologyManagerPolicy"]["value"] == "single-numa-node"
    analysis = json.loads((out["red"][2] / "analysis.json").read_text())
    assert analysis["exposure"]["systemd_cgroup"] is True  # read from the redacted config.toml


# -- the policy alone, on random documents ----------------------------------------------------------
SECRET_KEYS = ("password", "passwd", "secret", "client_secret", "token", "api_key", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY",
               "auth", "credentials", "DB_PASS", "Authorization", "privateKey", "x-api-key")
SAFE_KEYS = ("name", "mode", "SystemdCgroup", "enable_cdi", "runtime_type", "cgroup_manager", "deviceListStrategy",
             "NVIDIA_VISIBLE_DEVICES", "DEVICE_LIST_STRATEGY", "hooks_dir", "key_file", "path")
_SPECIAL = string.punctuation + " "
#: a secret value: any printable characters around a core with a mixed-case marker no output holds otherwise
SECRET = st.builds(lambda a, core, b: f"{a}sEcR{core}{b}", st.text(_SPECIAL + string.ascii_letters, max_size=6),
                   st.text(string.ascii_letters + string.digits, min_size=4, max_size=12),
                   st.text(_SPECIAL + string.digits, max_size=6))
SAFE = st.one_of(st.booleans(), st.integers(0, 65535), st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1,
                                                                   max_size=12))


def _tables(depth: int):
    leaf = st.dictionaries(st.sampled_from(SAFE_KEYS), SAFE, max_size=4)
    planted = st.dictionaries(st.sampled_from(SECRET_KEYS), SECRET, max_size=3)
    node = st.builds(lambda a, b: {**a, **b}, leaf, planted)
    if depth == 0:
        return node
    return st.builds(lambda n, kids, env: {**n, **kids, **({"env": env} if env else {})}, node,
                     st.dictionaries(st.sampled_from(("plugins", "runtimes", "nvidia", "cri", "registry")),
                                     _tables(depth - 1), max_size=2),
                     st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(SECRET_KEYS), SECRET), max_size=2))


def _cores(text: str) -> list[str]:
    """The marker and core of every planted value (what no output may hold, escaped or not)."""
    return re.findall(r"sEcR[A-Za-z0-9]+", text)


def _safe_leaves(doc, where=()):
    for k, v in doc.items():
        if isinstance(v, dict):
            yield from _safe_leaves(v, (*where, k))
        elif k in SAFE_KEYS:
            yield (*where, k), v


def _at(doc, path):
    for k in path:
        doc = doc[k]
    return doc


DUMP = {"toml": (tomli_w.dumps, tomllib.loads), "json": (json.dumps, json.loads),
        "yaml": (lambda d: yaml.safe_dump(d, sort_keys=False), yaml.safe_load)}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(DUMP)), _tables(2))
def test_random_documents_lose_every_planted_value_and_still_parse(fmt, doc):
    dump, load = DUMP[fmt]
    text = dump(doc)
    r = redact_config(text.encode(), fmt)
    out = r.data.decode()
    for core in _cores(json.dumps(doc)):
        assert core not in out
    got = load(out)
    for path, value in _safe_leaves(doc):
        assert _at(got, path) == value, path


ENV_LINE = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(SAFE_KEYS), st.text(string.ascii_lowercase + string.digits,
                                                                           min_size=1, max_size=10)),
    st.builds(lambda k, v, q, e: f"{'export ' if e else ''}{k}={q}{v}{q}", st.sampled_from(SECRET_KEYS),
              SECRET.map(lambda v: v.replace("\\", "\\\\").replace('"', '\\"').replace("'", "").replace("$", "")
                         .replace("`", "")), st.sampled_from(['"']), st.booleans()),
    st.builds(lambda v: f'ARGS="--v=2 --token {v} --node-labels=a=b"',
              SECRET.map(lambda v: "".join(c for c in v if c.isalnum()))),
    # a comment is free text: an unquoted value there runs to the next space, as in a log line
    st.builds(lambda v: f"# old: password={v}", SECRET.map(lambda v: v.replace(" ", ""))))


@settings(max_examples=150, deadline=None)
@given(st.lists(ENV_LINE, max_size=8).map("\n".join))
def test_random_env_files_lose_every_planted_value_and_still_parse(text):
    out = redact_config(text.encode(), "env").data.decode()
    for core in _cores(text):
        assert core not in out
    got, want = kc.env_file(out), kc.env_file(text)  # shlex-split: unbalanced quotes would be kept as written
    assert set(got) == set(want)
    for k in set(want) & set(SAFE_KEYS):
        assert got[k] == want[k]


def test_values_the_parser_does_not_return_are_not_stored_either():
    # a duplicate key (JSON, YAML) or a YAML merge key hides a value from the parsed document, and a
    # comment is not in it at all: none of them may slip through a copy "stored as on the node"
    hidden = {
        "json": '{"hook": {"args": ["x", "--token", "dup-json-1"]}, "hook": {"args": ["x"]}}',
        "yaml": "base: {args: [x, --token, merge-yaml-1]}\nhook:\n  <<: {args: [x, --token, merge-yaml-2]}\n"
                "  args: [x]\n# --token comment-yaml-1\n",
        "toml": 'a = 1  # https://u:comment-toml-1@h\n# password = "comment-toml-2"\nNoNewKeyring = false\n',
    }
    for fmt, text in hidden.items():
        r = redact_config(text.encode(), fmt)
        out = r.data.decode()
        assert not re.search(r"(?:dup|merge|comment)-\w+-\d", out.replace("merge-yaml-1", "")), (fmt, out)
        DUMP[fmt][1](out)  # still parses
    # base's own value is in the parsed document and hashed there; a bare TOML bool stays a bool
    assert "merge-yaml-1" not in redact_config(hidden["yaml"].encode(), "yaml").data.decode()
    toml = redact_config(hidden["toml"].encode(), "toml")
    assert tomllib.loads(toml.data.decode()) == {"a": 1, "NoNewKeyring": False} and toml.values == 2
    assert "every other line as on the node" in toml.notes[0]  # the layout kept: only comments changed
