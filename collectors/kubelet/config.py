"""What the kubelet was told: its command-line flags and its ``KubeletConfiguration`` file, merged as kubelet
merges them. Pure functions over text already read (the collector stores every file, redacted, and
reads the stored copy back).

Where the flags come from, first found (``collectors.kubelet`` names which in ``flags_source``):

1. the running kubelet's ``/proc/<pid>/cmdline`` (a process whose comm is ``kubelet`` and whose every uid
   in ``/proc/<pid>/status`` is 0: a user's process named kubelet must not choose what is read);
2. its systemd unit: ``kubelet.service`` and the ``kubelet.service.d/*.conf`` drop-ins (``Environment=``,
   ``EnvironmentFile=``, the last ``ExecStart=``, with ``$VAR`` split into words and ``${VAR}`` kept as one
   word, systemd.service(5) "Command lines"); kubeadm's drop-in ``10-kubeadm.conf`` (kubernetes/release
   ``cmd/krel/templates/latest/kubeadm/kubeadm.spec`` installs it in ``%{_unitdir}/kubelet.service.d``) reads
   ``/var/lib/kubelet/kubeadm-flags.env`` and ``/etc/default/kubelet`` (RPM: ``/etc/sysconfig/kubelet``) for
   ``KUBELET_KUBEADM_ARGS`` and ``KUBELET_EXTRA_ARGS``;
3. k3s / RKE2 ``config.yaml`` (and ``config.yaml.d/*.yaml``) ``kubelet-arg`` lists (``"cpu-manager-policy=static"``;
   a ``kubelet-arg+`` key appends, docs.k3s.io "Configuration File"), k3s running kubelet in its own
   process (no ``kubelet`` comm).

The file: ``--config``, else the first that exists of :data:`CONFIG_FILES` (each stack's known path), with
the drop-in directory ``--config-dir`` (else :data:`DROP_IN_DIRS`; files ``*.conf`` in name order, later
wins; KEP-3983). Precedence (kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/, "Kubelet
configuration merging order"): feature gates on the command line (lowest), the config file, its drop-ins,
then the other command-line flags (highest). ``/etc/kubernetes/kubelet.conf`` is a kubeconfig with the
node's credentials and is never read.
"""
from __future__ import annotations

import re
import shlex

#: flags that set what this collector reports (Go pflag spellings: --name=value, --name value, -name)
FLAGS = ("config", "config-dir", "cpu-manager-policy", "cpu-manager-reconcile-period", "topology-manager-policy",
         "memory-manager-policy", "feature-gates", "root-dir")
#: KubeletConfiguration fields reported, with the flag that overrides each
FIELDS = {"cpuManagerPolicy": "cpu-manager-policy", "cpuManagerReconcilePeriod": "cpu-manager-reconcile-period",
          "topologyManagerPolicy": "topology-manager-policy", "memoryManagerPolicy": "memory-manager-policy"}
GATE = "InPlacePodVerticalScaling"
DEFAULT_ROOT = "/var/lib/kubelet"
#: (path, the stack that writes it) in the order looked at when no --config is known
CONFIG_FILES = (("/var/lib/kubelet/config.yaml", "kubeadm"),
                ("/etc/kubernetes/kubelet/kubelet-config.json", "EKS (Amazon Linux 2)"),
                ("/etc/kubernetes/kubelet/config.json", "EKS (Amazon Linux 2023, nodeadm)"),
                ("/home/kubernetes/kubelet-config.yaml", "GKE"))
#: drop-in directories looked at when no --config-dir is known (EKS AL2023's nodeadm; the kubelet.conf.d of
#: kubernetes.io's drop-in page; k3s and RKE2 pass theirs as --config-dir)
DROP_IN_DIRS = ("/etc/kubernetes/kubelet/config.json.d", "/etc/kubernetes/kubelet.conf.d",
                "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d", "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d")
#: never read: kubeconfigs holding the node's client key or token
NEVER = ("/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf", "/var/lib/kubelet/kubeconfig")
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
K3S_CONFIGS = ("/etc/rancher/k3s/config.yaml", "/etc/rancher/rke2/config.yaml")
NOT_SET = "not set (kubelet default: none)"


def flags(argv: list[str]) -> dict[str, str]:
    """The :data:`FLAGS` given in ``argv`` (Go pflag: ``--name=value`` or ``--name value``, one or two
    dashes); a repeated flag's last value wins, except ``--feature-gates``, whose values are joined
    with commas (pflag's map flags merge repeated values)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.lstrip("-").partition("=")
        if a.startswith("-") and name in FLAGS:
            if not eq:
                value, i = (argv[i + 1], i + 1) if i + 1 < len(argv) else ("", i)
            if name == "feature-gates" and out.get(name):
                value = out[name] + "," + value
            out[name] = value
        i += 1
    return out


def feature_gates(text: str | None) -> dict[str, bool]:
    """``"A=true,B=false"`` -> ``{"A": True, "B": False}``; a malformed pair is left out."""
    out = {}
    for pair in (text or "").split(","):
        k, _, v = pair.strip().partition("=")
        if k and v.strip().lower() in ("true", "false"):
            out[k.strip()] = v.strip().lower() == "true"
    return out


# -- systemd units and env files ------------------------------------------------------------------
def env_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of an EnvironmentFile (systemd.exec(5): ``#``/``;`` comments, quotes removed)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        k, _, v = line.partition("=")
        try:
            v = " ".join(shlex.split(v))
        except ValueError:  # unbalanced quotes: keep as written
            v = v.strip()
        out[k.strip()] = v
    return out


def _logical_lines(text: str) -> list[str]:
    """Unit file lines with ``\\``-continuations joined."""
    out, cur = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    return out + ([cur] if cur else [])


def unit_settings(texts: list[str]) -> tuple[dict[str, str], list[str], str | None]:
    """``(environment, environment files, ExecStart)`` of a unit and its drop-ins, in the order given
    (an empty ``ExecStart=`` resets it, as in a drop-in; an ``EnvironmentFile=-path`` is optional)."""
    env: dict[str, str] = {}
    files: list[str] = []
    exec_start = None
    for text in texts:
        for line in _logical_lines(text):
            key, eq, value = line.strip().partition("=")
            if not eq:
                continue
            if key == "Environment":
                try:
                    words = shlex.split(value)
                except ValueError:
                    words = value.split()
                env.update(w.split("=", 1) for w in words if "=" in w)
            elif key == "EnvironmentFile" and value.strip():
                files.append(value.strip().lstrip("-"))
            elif key == "ExecStart":
                exec_start = value.strip() or None
    return env, files, exec_start


def expand(exec_start: str, env: dict[str, str]) -> list[str]:
    """``ExecStart`` as the argv systemd would run: a word that is only ``$VAR`` becomes that value's
    whitespace-separated words, ``${VAR}`` inside a word is replaced in place (systemd.service(5)); the
    ``-@:+!`` prefixes are dropped. Unknown variables are empty."""
    try:
        words = shlex.split(exec_start)
    except ValueError:
        words = exec_start.split()
    argv = []
    for w in words:
        m = re.fullmatch(r"\$(\w+)", w)
        if m:
            argv.extend(env.get(m.group(1), "").split())
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda x: env.get(x.group(1), ""), w))
    if argv:
        argv[0] = argv[0].lstrip("-@:+!")
    return argv


def k3s_args(docs: list) -> list[str]:
    """``--name=value`` flags from k3s / RKE2 ``config.yaml`` documents in order: ``kubelet-arg`` replaces,
    ``kubelet-arg+`` appends; a single string counts as a one-item list."""
    args: list[str] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        for key in ("kubelet-arg", "kubelet-arg+"):
            v = doc.get(key)
            items = [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else None
            if items is not None:
                args = (args if key.endswith("+") else []) + [f"--{x.lstrip('-')}" for x in items]
    return args


# -- the merged configuration ---------------------------------------------------------------------
def _unset() -> dict:
    return {"value": None, "source": NOT_SET}


def merged(files: list[tuple[str, dict]], argv_flags: dict[str, str], flags_source: str | None) -> dict:
    """``{field: {"value", "source"}}`` for :data:`FIELDS`, ``featureGates`` and :data:`GATE`, from the
    parsed config file and drop-ins (``[(path, KubeletConfiguration dict)]`` in merge order) and the
    command-line flags: each value with where it was read; a field nothing sets is ``None`` with
    :data:`NOT_SET`, never kubelet's default shown as the value."""
    out = {name: _unset() for name in FIELDS}
    gates: dict[str, tuple[bool, str]] = {}
    for flag_gate, on in feature_gates(argv_flags.get("feature-gates")).items():  # lowest precedence
        gates[flag_gate] = (on, f"{flags_source} --feature-gates")
    for path, doc in files:
        for name in FIELDS:
            v = doc.get(name)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                out[name] = {"value": str(v), "source": f"{path} {name}"}
        fg = doc.get("featureGates")
        for gate, on in (fg.items() if isinstance(fg, dict) else ()):
            if isinstance(on, bool):
                gates[str(gate)] = (on, f"{path} featureGates")
    for name, flag in FIELDS.items():
        if flag in argv_flags:
            out[name] = {"value": argv_flags[flag], "source": f"{flags_source} --{flag} (a flag overrides the file)"}
    out["featureGates"] = ({"value": {g: on for g, (on, _) in sorted(gates.items())},
                            "source": "; ".join(sorted({src for _, src in gates.values()}))} if gates else _unset())
    out[GATE] = {"value": gates[GATE][0], "source": gates[GATE][1]} if GATE in gates else \
        {"value": None, "source": "not set (the kubelet version's default applies)"}
    return out
