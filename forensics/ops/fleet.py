"""``gpu-forensics fleet BUNDLE...``: one exposure report across many nodes' bundles.

Each bundle is opened and analysed on its own (:func:`forensics.ops.pipeline.analyze`, the same
``gpu-forensics/analysis/v1`` dict ``analyze`` writes), in a pool of worker processes, and only a
small per-node summary (:func:`summarize`, a few kilobytes) comes back, so memory stays flat in the
number of bundles; a ``.tar.gz`` bundle's temporary directory is removed as soon as its node is done.
An ``analysis.json`` written by ``gpu-forensics analyze --json`` (from a ticket, say) is taken in
place of its bundle: the summary is built from the analysis dict alone (:func:`node_summary`), so
both give the same node record, except that a JSON cannot be checked against its bundle's manifest.

The report (:func:`build`, schema ``gpu-forensics/fleet/v1``) says, per node, whether it is
**broken** now (a GPU container already lost its devices), **exposed** (one daemon-reload away:
a hook-injected GPU container under the systemd cgroup driver, or new GPU pods would be), **safe**
(every GPU container keeps its devices across a reload) or **unknown** (no container or runtime
evidence), with the exposure section's own sentence as the reason. Nodes are grouped into pools
(a node-pool label stored by ``--kube``, else the host name without its trailing number), and the
settings that differ inside a pool are listed. Incidents of every node go on one timeline, and the
same trigger hitting many nodes (the same requester unit of the reload, e.g. ``snapd.service``, the
same ``dpkg`` package, or the same package versions) within :data:`MERGE_WINDOW` of each other is one
story. reports/fleet.py renders the JSON as HTML and computes nothing of its own.

Exit codes: 0 done; 1 done, but some bundle lacked evidence; 2 usage error (no bundle found);
3 some bundle could not be opened or does not match its manifest (the report lists it, and the
summary names each unreadable one with the reason); 5 the report could not be written (one line).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..bundle import INCOMPLETE, MANIFEST, Bundle, BundleError, verify
from ..bundle_open import read_bounded
from ..findings.verdicts import MECHANISMS
from ..timeutil import iso_z, parse_iso
from ..words import count_of
from .fleet_input import ANALYSIS, SUMMARY, problem

SCHEMA = "gpu-forensics/fleet/v1"
MERGE_WINDOW = timedelta(minutes=10)
CLASSES = ("broken", "exposed", "safe", "unknown")
#: node labels that name a node pool (GKE, EKS, Karpenter, AKS, OKE and common conventions), first wins
POOL_LABELS = ("cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "karpenter.sh/nodepool",
               "kubernetes.azure.com/agentpool", "agentpool", "oci.oraclecloud.com/node-pool-id",
               "node.kubernetes.io/pool", "nodepool", "pool")
MAX_TRIGGERS = 300  #: reloads kept per node for "also hit" (the newest)
MAX_MERGE_MINUTES = 525_600  #: --merge-window at most a year (times stay inside fleet_input.YEARS)
MAX_JOBS = 256               #: --jobs at most (worker processes)
MAX_ANALYSIS_JSON = 512 << 20  #: bytes of an analysis .json read (a FIFO or a 2 GiB sparse file is refused)


# -- inputs ----------------------------------------------------------------------------------------
def find_bundles(paths: list[str | Path]) -> list[Path]:
    """Expand the command line: a bundle directory (holding ``manifest.json``) or any file (a
    ``.tar.gz`` bundle, an analysis ``.json``) is taken as is; any other directory contributes the
    bundles directly inside it (one level; analysis JSON files only when named, e.g. by a shell glob),
    and the ``INCOMPLETE`` ones of an interrupted collection too, so that the report lists them as unreadable.
    Returns the paths sorted by name within each argument, each once. Raises ``FileNotFoundError``
    for a path that does not exist."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if not p.is_dir() or (p / MANIFEST).is_file():
            out.append(p)  # a file, or anything else (a FIFO): summarize reports what is wrong with it
            continue
        for child in sorted(p.iterdir()):
            if (child.is_dir() and ((child / MANIFEST).is_file() or (child / INCOMPLETE).is_file())) or \
                    (child.is_file() and child.name.endswith((".tar.gz", ".tgz"))):
                out.append(child)
    return list(dict.fromkeys(out))


# -- one node --------------------------------------------------------------------------------------
def summarize(path: str | Path) -> dict:
    """Open, verify and analyse one bundle, or read one analysis ``.json`` file; return its node
    summary (``{"node", "bundle", "class", "reason", "pool", "settings", "incidents", "triggers",
    ...}``, see :func:`node_summary`) or ``{"bundle", "error"}`` when it is not a readable bundle or
    analysis JSON. Never raises for a bad input."""
    from .pipeline import analyze
    if str(path).endswith(".json"):
        return _summarize_json(Path(path))
    try:
        b = Bundle.open(path)
    except BundleError as e:
        return {"bundle": str(path), "error": str(e)}
    try:
        problems = verify(b)
        return checked(analyze(b), problems, str(path))
    except BundleError as e:
        return {"bundle": str(path), "error": str(e)}
    except Exception as e:  # noqa: BLE001 - one bad bundle must not cost the fleet report
        return {"bundle": str(path), "error": f"analysis failed: {type(e).__name__}: {e}"}
    finally:
        b.close()


def _summarize_json(path: Path) -> dict:
    """:func:`summarize` of an analysis JSON file (schema ``gpu-forensics/analysis/v1``); its
    ``bundle`` is the file's path, as given."""
    from ..findings.analysis import SCHEMA as ANALYSIS_SCHEMA
    try:
        a = json.loads(read_bounded(path.parent, path.name, MAX_ANALYSIS_JSON, path))
    except (OSError, ValueError, RecursionError, BundleError) as e:
        return {"bundle": str(path), "error": f"cannot read the analysis JSON: {e}"}
    if not isinstance(a, dict) or a.get("schema") != ANALYSIS_SCHEMA:
        schema = a.get("schema") if isinstance(a, dict) else None
        return {"bundle": str(path), "error": f"not a {ANALYSIS_SCHEMA} JSON (schema {schema!r})"}
    try:
        return {**checked(a, [], str(path)), "bundle": str(path)}
    except Exception as e:  # noqa: BLE001 - as for a bundle: one bad file must not cost the fleet report
        return {"bundle": str(path), "error": f"summary failed: {type(e).__name__}: {e}"}


def checked(a: dict, integrity: list[str], path: str) -> dict:
    """:func:`node_summary` of ``a`` when ``a`` and the summary fit their schemas
    (:mod:`forensics.ops.fleet_input`), else ``{"bundle", "error"}`` naming the first value that does
    not (``skipped: not a valid analysis: incidents[0].window.end: ...``)."""
    why = problem(a, ANALYSIS)
    s = node_summary(a, integrity) if why is None else None
    why = why or problem(s, SUMMARY)
    return s if why is None else {"bundle": path, "error": f"skipped: not a valid analysis: {why}"}


def classify(exposure: dict) -> tuple[str, str]:
    """``(class, reason)`` from an analysis ``exposure`` section: ``broken`` when a container already
    lost its GPU, ``exposed`` when one is at risk or new GPU pods would be, ``unknown`` when the
    exposure was not assessed or the cgroup driver is unknown, else ``safe``. The reason is the
    exposure section's own verdict sentence."""
    rows = exposure.get("containers") or []
    verdict = exposure.get("verdict") or exposure.get("reason") or ""
    if not exposure.get("assessed"):
        return "unknown", verdict or "container and runtime evidence not in this bundle"
    if any(r.get("broken") for r in rows):
        return "broken", verdict
    if any(r.get("at_risk") for r in rows) or exposure.get("new_pods_exposed"):
        return "exposed", verdict
    if verdict.startswith("Undetermined"):
        return "unknown", verdict
    return "safe", verdict


def pool_of(node: str, labels: dict | None) -> tuple[str, str]:
    """``(pool, basis)``: the first :data:`POOL_LABELS` label present, else the short host name with
    its trailing number removed (``gpu-a100-007`` -> ``gpu-a100``), else the part before the last
    ``-``, else the name itself."""
    for key in POOL_LABELS:
        if labels and labels.get(key):
            return str(labels[key]), f"label {key}"
    short = (node or "unknown").split(".", 1)[0]
    m = re.fullmatch(r"(.+?)[-_]?\d+", short)
    if m:
        return m.group(1), "host name without its number"
    if "-" in short:
        return short.rsplit("-", 1)[0], "host name before its last '-'"
    return short, "host name"


def node_summary(a: dict, integrity: list[str]) -> dict:
    """The small per-node record the fleet report is built from (no timeline, no evidence bodies),
    from the analysis dict ``a`` alone (``exposure`` with its ``device_plugin``, ``kube``,
    ``node_facts``, ``incidents``, ``timeline``); ``integrity`` is the problems
    :func:`forensics.bundle.verify` found (``[]`` for an analysis JSON, which cannot be verified)."""
    exp = a.get("exposure") or {}
    cls, reason = classify(exp)
    rows = exp.get("containers") or []
    kube = a.get("kube") or {}
    source = (a.get("bundle") or {}).get("path") or ""
    node = a.get("node") or kube.get("node") or Path(source).name
    pool, basis = pool_of(node, kube.get("labels"))
    dp = exp.get("device_plugin") or {}
    nf = a.get("node_facts") or {}
    pv = nf.get("package_versions") or {}
    settings = {
        "SystemdCgroup": exp.get("systemd_cgroup"), "enable_cdi": exp.get("enable_cdi"),
        "nvidia-container-runtime.mode": exp.get("nvidia_runtime_mode"),
        "DEVICE_LIST_STRATEGY": ",".join(exp.get("device_list_strategy") or []) or None,
        "PASS_DEVICE_SPECS": exp.get("pass_device_specs"), "NVIDIA_DRIVER_ROOT": exp.get("driver_root"),
        "device plugin image": dp.get("image") or kube.get("device_plugin_images"),
        "systemd": nf.get("systemd_version"), "kernel": nf.get("kernel"), "os": nf.get("os"),
        "containerd": pv.get("containerd") or pv.get("containerd.io"), "runc": pv.get("runc"),
        "nvidia-container-toolkit": pv.get("nvidia-container-toolkit"),
    }
    pkg_attrs = {(e["evidence"].get("artifact"), e["evidence"].get("line")): e.get("attrs")
                 for e in a.get("timeline") or [] if e["kind"].startswith("package.") and e.get("evidence")}
    incidents = [_incident(inc, pkg_attrs) for inc in a.get("incidents") or []]
    triggers = [{"at": e.get("at"), "key": key} for e in a.get("timeline") or []
                if e["kind"] == "journal.reload" and (key := _unit_key((e.get("attrs") or {}).get("requester_unit")))]
    return {"node": node, "bundle": source, "collected_at": a.get("collected_at"), "class": cls,
            "reason": reason, "pool": pool, "pool_basis": basis, "settings": settings,
            "containers": {"total": len(rows), "gpu": sum(r.get("gpu_injection") not in (None, "none") for r in rows),
                           "broken": sum(bool(r.get("broken")) for r in rows),
                           "at_risk": sum(bool(r.get("at_risk")) for r in rows)},
            "broken_pods": sorted({f"{r.get('namespace')}/{r.get('pod')}" for r in rows if r.get("broken")})[:10],
            "at_risk_pods": sorted({f"{r.get('namespace')}/{r.get('pod')}" for r in rows
                                    if r.get("at_risk") and not r.get("broken")})[:10],
            "remedies": [r.get("what") for r in exp.get("remedies") or []],
            "incidents": incidents, "triggers": triggers[-MAX_TRIGGERS:],
            "missing": len((a.get("bundle") or {}).get("missing") or []), "integrity": integrity[:5]}


def _unit_key(unit: str | None) -> str | None:
    if not unit:
        return None
    return "reload:" + re.sub(r"^session-\d+\.scope$", "session-*.scope", unit)


def _incident(inc: dict, pkg_attrs: dict) -> dict:
    """An incident with the trigger it is merged on: ``key`` (None when no cause is confirmed) and
    ``at`` (the trigger's time, else the window's end)."""
    causes = {c["kind"]: c for c in inc.get("causes") or []}
    reload, pkg, boot = causes.get("daemon-reload"), causes.get("package-transaction"), causes.get("reboot")
    packages = []
    if pkg and pkg.get("verdict") == "confirmed":
        for ev in pkg.get("evidence") or []:
            attrs = pkg_attrs.get((ev.get("artifact"), ev.get("line"))) or {}
            for p in attrs.get("packages") or []:
                if isinstance(p, dict) and p.get("new"):
                    packages.append(f"{p.get('name')} {p.get('old') or '(new)'} → {p['new']}")
            if attrs.get("action") in ("install", "upgrade") and attrs.get("new_version"):
                packages.append(f"{str(attrs.get('package')).split(':')[0]} {attrs.get('old_version') or '(new)'}"
                                f" → {attrs['new_version']}")
    packages = sorted(set(packages))
    key, label, at, verdict = None, "no cause confirmed", inc["window"]["end"], None
    if reload and reload.get("verdict") == "confirmed":
        req = reload.get("requested_by") or {}
        key = _unit_key(req.get("unit")) or (f"dpkg:{req['package'].split(':')[0]}" if req.get("package") else None) \
            or (f"packages:{';'.join(packages)}" if packages else None)
        by = req.get("unit") or (f"dpkg ({req['package']})" if req.get("package") else None) or req.get("comm")
        label = "daemon-reload" + (f" requested by {by}" if by else ", requester unknown")
        at, verdict = reload.get("at") or at, "confirmed"
    elif pkg and pkg.get("verdict") == "confirmed":
        key = f"packages:{';'.join(packages)}" if packages else None
        label, at, verdict = "package transaction", pkg.get("at") or at, "confirmed"
    elif boot and boot.get("verdict") == "confirmed":
        key, label, at, verdict = "reboot", "reboot", boot.get("at") or at, "confirmed"
    elif (other := _best(inc.get("causes") or [])) is not None:  # the other causes of issue 26, by the title
        what = str(other.get("title") or other["kind"])
        key = other["kind"] if other["verdict"] == "confirmed" else None
        label = what + ("" if other["verdict"] == "confirmed" else " inferred (the evidence does not cover the window)")
        at, verdict = other.get("at") or at, other["verdict"]
    if packages:
        label += f" during {', '.join(packages[:4])}" + (" ..." if len(packages) > 4 else "")
    return {"id": inc["id"], "symptom": (inc.get("symptom") or "")[:200], "window": inc["window"],
            "at": at, "key": key, "label": label, "verdict": verdict, "packages": packages[:20]}


def _best(causes: list[dict]) -> dict | None:
    """The best-supported cause that fits (confirmed before inferred, a mechanism the node shows first, then the
    causes' own order, which is the rules'), as analysis.json holds it; ``None`` when none fits."""
    fit = [c for c in causes if c.get("verdict") in ("confirmed", "inferred")]
    return min(fit, key=lambda c: (c["verdict"] != "confirmed", MECHANISMS.get(c.get("mechanism"), 1),
                                   causes.index(c)), default=None)


# -- across nodes ----------------------------------------------------------------------------------
def build(summaries: list[dict], window: timedelta = MERGE_WINDOW) -> dict:
    """The fleet report (schema ``gpu-forensics/fleet/v1``) from :func:`summarize` results.

    Returns ``{"schema", "generated_at", "merge_window_s", "counts": {class: n}, "nodes": [...],
    "errors": [{"bundle", "error"}], "pools": [{"pool", "nodes", "classes", "differences":
    [{"setting", "values": [{"value", "count", "nodes"}]}]}], "stories": [{"id", "key", "label",
    "start", "end", "nodes", "incidents": [{"node", "incident", "at", "symptom"}], "also_hit":
    [{"node", "class", "at"}]}], "timeline": [{"at", "node", "pool", "class", "incident", "story",
    "summary"}]}``; times are ISO 8601 UTC strings."""
    nodes = sorted((s for s in summaries if "error" not in s), key=lambda s: (CLASSES.index(s["class"]), s["node"]))
    errors = [s for s in summaries if "error" in s]
    stories = _stories(nodes, window)
    story_of = {(i["node"], i["incident"]): s["id"] for s in stories for i in s["incidents"]}
    for n in nodes:
        for inc in n["incidents"]:
            inc["story"] = story_of.get((n["node"], inc["id"]))
    timeline = sorted(({"at": inc["at"], "node": n["node"], "pool": n["pool"], "class": n["class"],
                        "incident": inc["id"], "story": inc["story"], "summary": f"{inc['label']}: {inc['symptom']}"}
                       for n in nodes for inc in n["incidents"]), key=lambda r: (r["at"] or "", r["node"]))
    for n in nodes:
        n.pop("triggers", None)
    counts = Counter(n["class"] for n in nodes)
    return {"schema": SCHEMA, "generated_at": iso_z(datetime.now(timezone.utc).replace(microsecond=0)),
            "merge_window_s": int(window.total_seconds()), "bundles": len(summaries),
            "counts": {c: counts.get(c, 0) for c in CLASSES}, "nodes": nodes, "errors": errors,
            "pools": _pools(nodes), "stories": stories, "timeline": timeline}


def _stories(nodes: list[dict], window: timedelta) -> list[dict]:
    """Incidents with the same trigger key whose trigger times follow each other within ``window``
    form one story; an incident without a key is a story of its own."""
    keyed, single = defaultdict(list), []
    for n in nodes:
        for inc in n["incidents"]:
            item = (parse_iso(inc["at"]), n["node"], inc)
            (keyed[inc["key"]].append(item) if inc["key"] else single.append([item]))
    chains = []
    for key, items in keyed.items():
        items.sort(key=lambda x: (x[0], x[1]))
        chain = [items[0]]
        for it in items[1:]:
            if it[0] - chain[-1][0] <= window:
                chain.append(it)
            else:
                chains.append(chain)
                chain = [it]
        chains.append(chain)
    chains += single
    chains.sort(key=lambda c: (c[0][0], c[0][1]))
    by_node = {n["node"]: n for n in nodes}
    out = []
    for i, chain in enumerate(chains, 1):
        start, end, key = chain[0][0], chain[-1][0], chain[0][2]["key"]
        members = sorted({node for _, node, _ in chain})
        also = []
        if key:
            for n in nodes:
                if n["node"] in members:
                    continue
                hits = [t["at"] for t in n.get("triggers") or []
                        if t["key"] == key and start - window <= parse_iso(t["at"]) <= end + window]
                if hits:
                    also.append({"node": n["node"], "class": n["class"], "at": hits[0]})
        packages = sorted({p for _, _, inc in chain for p in inc["packages"]})
        label = chain[0][2]["label"].split(" during ")[0] + (f" during {', '.join(packages[:4])}" if packages else "")
        out.append({"id": f"S{i}", "key": key, "label": label, "start": iso_z(start), "end": iso_z(end),
                    "span_s": round((end - start).total_seconds(), 1), "nodes": members,
                    "classes": dict(Counter(by_node[m]["class"] for m in members)),
                    "incidents": [{"node": node, "incident": inc["id"], "at": inc["at"], "verdict": inc["verdict"],
                                   "symptom": inc["symptom"]} for _, node, inc in chain],
                    "also_hit": also, "packages": packages})
    return out


def _pools(nodes: list[dict]) -> list[dict]:
    """Per pool: node count, classes, and each setting with more than one value among its nodes
    (most common value first, so the odd nodes stand out)."""
    pools = defaultdict(list)
    for n in nodes:
        pools[n["pool"]].append(n)
    out = []
    for name, members in sorted(pools.items()):
        diffs = []
        for key in members[0]["settings"]:
            vals = defaultdict(list)
            for n in members:
                vals[json.dumps(n["settings"].get(key), sort_keys=True)].append(n["node"])
            if len(vals) > 1:
                diffs.append({"setting": key, "values": [
                    {"value": json.loads(v), "count": len(ns), "nodes": sorted(ns)[:25]}
                    for v, ns in sorted(vals.items(), key=lambda kv: (-len(kv[1]), kv[0]))]})
        out.append({"pool": name, "basis": members[0]["pool_basis"], "nodes": len(members),
                    "classes": {c: sum(n["class"] == c for n in members) for c in CLASSES}, "differences": diffs})
    return out


# -- running it ------------------------------------------------------------------------------------
def run(paths: list[Path], jobs: int = 2, window: timedelta = MERGE_WINDOW) -> dict:
    """Summarise every bundle in ``paths`` with ``jobs`` worker processes (1: in this process) and
    build the report (:func:`build`). Results are consumed as they arrive; nothing but the summaries
    is kept."""
    if jobs <= 1 or len(paths) < 4:
        return build([summarize(p) for p in paths], window)
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=500) as pool:
        summaries = list(pool.imap(summarize, [str(p) for p in paths], chunksize=4))
    return build(summaries, window)


def build_parser() -> argparse.ArgumentParser:
    """The ``fleet`` subcommand's options (also used by :func:`add_subparser`)."""
    p = argparse.ArgumentParser(prog="gpu-forensics fleet", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``fleet``'s arguments to ``p`` (for wiring into the main CLI's subparsers)."""
    p.add_argument("bundles", nargs="+", metavar="BUNDLE",
                   help="bundle directories, .tar.gz files or analysis .json files, or folders of bundles")
    p.add_argument("--out", default="fleet-report", help="folder for fleet.html and fleet.json (default ./fleet-report)")
    p.add_argument("--html", help="write the HTML report here instead (default <out>/fleet.html)")
    p.add_argument("--json", help="write the JSON report here instead (default <out>/fleet.json)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--merge-window", type=float, default=MERGE_WINDOW.total_seconds() / 60, metavar="MINUTES",
                   help="the same trigger within this many minutes on several nodes is one story (default 10)")


def run_args(args) -> int:
    """Run ``fleet`` from parsed arguments; prints a summary (every text from the inputs through
    :func:`reports.timeline.inert`: no control character reaches the terminal) and returns the exit code."""
    from reports.timeline import inert
    if not 0 <= args.merge_window <= MAX_MERGE_MINUTES or not 1 <= args.jobs <= MAX_JOBS:
        print(f"gpu-forensics: error: --merge-window must be 0..{MAX_MERGE_MINUTES} minutes and --jobs "
              f"1..{MAX_JOBS}", file=sys.stderr)
        return 2
    try:
        paths = find_bundles(args.bundles)
    except FileNotFoundError as e:
        print(f"gpu-forensics: error: {inert(e, newline=False)}", file=sys.stderr)
        return 2
    if not paths:
        print("gpu-forensics: error: no bundle found (give bundle directories, .tar.gz files, or folders of them)",
              file=sys.stderr)
        return 2
    report = run(paths, args.jobs, timedelta(minutes=args.merge_window))
    out = Path(args.out)
    html_path, json_path = Path(args.html or out / "fleet.html"), Path(args.json or out / "fleet.json")
    from reports import fleet as fleet_report
    from ..output import describe
    try:
        fleet_report.write(report, html_path, json_path)
    except OSError as e:
        print(f"gpu-forensics: error: cannot write the fleet report {inert(e.filename or html_path, newline=False)}: "
              f"{describe(e)}; "
              "give --out (or --html, --json) a writable place, e.g. /var/tmp/fleet-report", file=sys.stderr)
        return 5
    c = report["counts"]
    print(f"{count_of(len(report['nodes']), 'node')}: {c['broken']} broken, {c['exposed']} exposed, {c['safe']} safe, "
          f"{c['unknown']} unknown; {count_of(len(report['stories']), 'story')}; "
          f"{count_of(len(report['errors']), 'bundle')} unreadable or skipped")
    for err in report["errors"]:
        said = err["error"] if err["bundle"] in err["error"] else f"{err['bundle']}: {err['error']}"
        print(f"  {'skipped' if 'skipped: ' in said else 'unreadable'}: {inert(said.replace('skipped: ', ''), newline=False)}")
    for s in report["stories"]:
        print(f"  {s['id']} {s['start']}: {inert(s['label'], newline=False)} on {len(s['nodes'])} node(s)")
    print(f"wrote {inert(html_path, newline=False)}\nwrote {inert(json_path, newline=False)}")
    if report["errors"] or any(n["integrity"] for n in report["nodes"]):
        return 3
    return 1 if any(n["missing"] for n in report["nodes"]) else 0


def main(argv: list[str] | None = None) -> int:
    """``gpu-forensics fleet`` as a function: parse ``argv`` (without the subcommand) and run it."""
    return run_args(build_parser().parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
