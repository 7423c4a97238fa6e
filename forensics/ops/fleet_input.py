"""The part of an analysis dict (schema ``gpu-forensics/analysis/v1``) that ``fleet`` reads, checked
before it is read: types, required keys, times that parse and stay in range, sizes (issue 27).

An analysis ``.json`` handed to ``fleet`` may come from anywhere (a ticket, a compromised node's
upload), so :func:`problem` names the first value that does not fit, as ``PATH: what``
(``incidents[0].window.end: not an ISO 8601 time with a zone: 'garbage'``); ``fleet`` sets such a
file aside with that line and reports the rest. Only what :func:`forensics.ops.fleet.node_summary`
and :func:`forensics.ops.fleet.build` use is described; any other key is left alone.

The description is data: a spec is a type (``str``, ``int``, ...), a tuple of types, :data:`TIME`,
:data:`JSON` (any JSON value), :class:`Opt` (the spec or ``None``/absent), :class:`ListOf` or a ``dict``
of key -> spec whose keys ending in ``!`` must be present.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..timeutil import parse_iso

MAX_ITEMS = 200_000        #: items of one list (the timeline of a busy node holds tens of thousands)
YEARS = (1971, 9000)       #: the years a time may fall in (a merge window of a year stays inside 1..9999)
TIME = "time"              #: an ISO 8601 time with a zone, inside :data:`YEARS`
JSON = "json"              #: any JSON value
SCALAR = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Opt:
    """``spec``, or ``None``, or absent."""
    spec: object


@dataclass(frozen=True)
class ListOf:
    """A list (at most :data:`MAX_ITEMS` items) of ``spec``."""
    spec: object


_EVIDENCE = {"artifact": SCALAR, "line": SCALAR}
_CAUSE = {"kind!": str, "verdict": Opt(str), "title": JSON, "mechanism": Opt(str), "at": Opt(TIME),
          "requested_by": Opt({"unit": Opt(str), "package": Opt(str), "comm": JSON}),
          "evidence": Opt(ListOf(_EVIDENCE))}
_ROW = {"broken": JSON, "at_risk": JSON, "gpu_injection": Opt(str), "namespace": JSON, "pod": JSON}
#: what fleet reads of an analysis dict
ANALYSIS = {
    "node": Opt(str), "collected_at": Opt(TIME),
    "bundle": Opt({"path": Opt(str), "missing": Opt(ListOf(JSON))}),
    "kube": Opt({"node": Opt(str), "labels": Opt(dict), "device_plugin_images": JSON}),
    "node_facts": Opt({"package_versions": Opt(dict), "systemd_version": JSON, "kernel": JSON, "os": JSON}),
    "exposure": Opt({"assessed": JSON, "verdict": Opt(str), "reason": Opt(str), "new_pods_exposed": JSON,
                     "containers": Opt(ListOf(_ROW)), "device_list_strategy": Opt(ListOf(str)),
                     "device_plugin": Opt({"image": JSON}), "remedies": Opt(ListOf({"what": JSON})),
                     **{k: JSON for k in ("systemd_cgroup", "enable_cdi", "nvidia_runtime_mode",
                                          "pass_device_specs", "driver_root")}}),
    "timeline": Opt(ListOf({"kind!": str, "at": JSON, "evidence": Opt(_EVIDENCE),
                            "attrs": Opt({"requester_unit": Opt(str), "packages": Opt(ListOf(JSON))})})),
    "incidents": Opt(ListOf({"id!": str, "symptom": Opt(str), "window!": {"start!": TIME, "end!": TIME},
                             "causes": Opt(ListOf(_CAUSE))})),
}
#: what :func:`forensics.ops.fleet.build` reads of a node summary (the times it merges stories on)
SUMMARY = {"node!": str, "pool!": str, "class!": str, "settings!": dict,
           "incidents!": ListOf({"id!": str, "at!": TIME, "key": Opt(str), "packages!": ListOf(str)}),
           "triggers!": ListOf({"at!": TIME, "key!": str})}


def problem(value, spec=ANALYSIS, path: str = "") -> str | None:
    """The first place where ``value`` does not fit ``spec`` (module docstring), as ``PATH: what``
    (the value shown by ``repr``, cut at 60 characters), or ``None`` when it fits."""
    where = path or "(top)"
    if isinstance(spec, Opt):
        return None if value is None else problem(value, spec.spec, path)
    if spec == JSON:
        return None
    if spec == TIME:
        return _time(value, where)
    if isinstance(spec, ListOf):
        # a list, or the timeline view of an analysis made here (forensics/findings/entries.py)
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            return f"{where}: not a list: {_shown(value)}"
        if len(value) > MAX_ITEMS:
            return f"{where}: {len(value)} items, more than {MAX_ITEMS}"
        return next((p for i, v in enumerate(value) if (p := problem(v, spec.spec, f"{path}[{i}]"))), None)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where}: not an object: {_shown(value)}"
        for key, sub in spec.items():
            name = key.rstrip("!")
            if key.endswith("!") and name not in value:
                return f"{path + '.' if path else ''}{name}: missing"
            if (p := problem(value.get(name), sub if key.endswith("!") else Opt(sub),
                             f"{path + '.' if path else ''}{name}")):
                return p
        return None
    if isinstance(value, bool) and spec in (int, float):
        return f"{where}: a boolean where a number belongs"
    return None if isinstance(value, spec) else f"{where}: not {_kind(spec)}: {_shown(value)}"


def _time(value, where: str) -> str | None:
    if not isinstance(value, str):
        return f"{where}: not an ISO 8601 time: {_shown(value)}"
    try:
        t = parse_iso(value)
    except (ValueError, OverflowError):
        return f"{where}: not an ISO 8601 time with a zone: {_shown(value)}"
    if not YEARS[0] <= t.year <= YEARS[1]:
        return f"{where}: the year {t.year} is outside {YEARS[0]}..{YEARS[1]}"
    return None


def _kind(spec) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "an object",
             list: "a list", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in (spec if isinstance(spec, tuple) else (spec,)))


def _shown(value) -> str:
    s = repr(value)
    return s if len(s) <= 60 else s[:57] + "..."
