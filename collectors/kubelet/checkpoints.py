"""kubelet's JSON checkpoints read into plain facts: ``cpu_manager_state``, ``memory_manager_state`` and the
device manager's ``kubelet_internal_checkpoint``. Pure functions of the parsed JSON; none raises for
a value of the wrong type (it is skipped, and the shape that was met is named).

Shapes, from kubernetes' own structs (Go ``encoding/json`` of them; the checksum is kubelet's FNV-32a of
a go-spew dump, which this code does not recompute: it is kept, never verified):

- ``cpu_manager_state`` (``pkg/kubelet/cm/cpumanager/state/checkpoint.go``): V1 ``{"policyName",
  "defaultCpuSet", "entries": {containerID: cpuset}, "checksum"}`` (kubelet <= 1.17); V2 ``entries``
  ``{podUID: {containerName: cpuset}}`` (1.18 on); V3 adds ``"podEntries": {podUID: {"cpuSet"}}`` (pod-level
  resource managers, KEP-5526); V4 keeps the V3 fields for older kubelets and adds ``"data"``, the V3 fields
  serialised as a JSON string, with ``"dataChecksum"`` (the authoritative copy when present);
- ``memory_manager_state`` (``pkg/kubelet/cm/memorymanager/state/checkpoint.go``, ``state.go``):
  ``{"policyName", "machineState": {numa: {"numberOfAssignments", "memoryMap", "cells"}}, "entries":
  {podUID: {containerName: [{"numaAffinity": [int], "type", "size"}]}}, "podEntries"?, "checksum"}``;
- ``device-plugins/kubelet_internal_checkpoint`` (``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``,
  ``checkpointv1.go``): ``{"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName",
  "DeviceIDs", "AllocResp"}], "RegisteredDevices": {resource: [id]}}, "Checksum", "BootID"?}``; ``DeviceIDs``
  is ``{"<numa>": [id]}`` from 1.20 on (``"-1"`` when the plugin gave no topology), a plain list before
  (k8s <= 1.19, ``PodDevicesEntryV1``); ``BootID`` appears in the newest kubelets.
"""
from __future__ import annotations

import json

MAX_ENTRIES = 10000  #: pods (and device entries) read from one checkpoint at most


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def get(d: dict, key: str):
    """``d[key]`` as Go's ``encoding/json`` finds a struct field: the exact key, else one equal to it
    ignoring case (kubernetes' own tests write ``defaultCPUSet`` for the tag ``defaultCpuSet``)."""
    if key in d:
        return d[key]
    low = key.lower()
    return next((v for k, v in d.items() if isinstance(k, str) and k.lower() == low), None)


def cpu_manager_state(doc) -> dict:
    """``{"version": "v1"|"v2"|"v3"|"v4"|None, "policy", "default_cpuset", "entries": {pod_uid: {container:
    cpuset}}, "container_id_entries": {container_id: cpuset} (V1 only), "pod_entries": {pod_uid: cpuset},
    "checksum"}`` of a parsed ``cpu_manager_state``. Raises nothing."""
    doc = _dict(doc)
    version, body = _cpu_version(doc)
    entries, by_id = {}, {}
    for key, val in list(_dict(get(body, "entries")).items())[:MAX_ENTRIES]:
        if isinstance(val, dict):  # V2+: pod UID -> container name -> cpuset
            entries[key] = {c: s for c, s in val.items() if isinstance(s, str)}
        elif isinstance(val, str):  # V1: container ID -> cpuset
            by_id[key] = val
    pods = {uid: _str(get(_dict(v), "cpuSet")) for uid, v in list(_dict(get(body, "podEntries")).items())[:MAX_ENTRIES]}
    return {"version": version, "policy": _str(get(body, "policyName")),
            "default_cpuset": _str(get(body, "defaultCpuSet")), "entries": entries,
            "container_id_entries": by_id, "pod_entries": pods,
            "checksum": get(doc, "dataChecksum") if version == "v4" else get(doc, "checksum")}


def _cpu_version(doc: dict) -> tuple[str | None, dict]:
    """The checkpoint's format and the object holding its fields (V4: the ``data`` string parsed)."""
    if isinstance(get(doc, "data"), str):
        try:
            inner = json.loads(get(doc, "data"))
        except (ValueError, RecursionError):
            inner = None
        if isinstance(inner, dict):
            return "v4", inner
    entries = _dict(get(doc, "entries"))
    if get(doc, "podEntries") is not None:
        return "v3", doc
    if any(isinstance(v, str) for v in entries.values()):
        return "v1", doc
    if entries:
        return "v2", doc
    return None, doc  # no entries: V1 and V2 look alike (kubelet 1.18+ writes V2)


def memory_manager_state(doc) -> dict:
    """``{"policy", "entries": {pod_uid: {container: [{"numa_affinity": [int], "type", "size"}]}},
    "numa_nodes": [int] (the machine state's NUMA node ids), "checksum"}``. Raises nothing."""
    doc = _dict(doc)
    entries: dict = {}
    for uid, conts in list(_dict(get(doc, "entries")).items())[:MAX_ENTRIES]:
        entries[uid] = {}
        for name, blocks in _dict(conts).items():
            entries[uid][name] = [{"numa_affinity": get(b, "numaAffinity"), "type": _str(get(b, "type")),
                                   "size": get(b, "size")} for b in blocks if isinstance(b, dict)] \
                if isinstance(blocks, list) else []
    nodes = sorted(int(k) for k in _dict(get(doc, "machineState")) if str(k).lstrip("-").isdigit())
    return {"policy": _str(get(doc, "policyName")), "entries": entries, "numa_nodes": nodes,
            "checksum": get(doc, "checksum")}


def device_ids(v) -> tuple[list[str], dict | None]:
    """``(ids, {numa: [ids]} or None)`` of a ``DeviceIDs`` value: the NUMA map of 1.20+ or the plain list
    of <= 1.19 (no NUMA then)."""
    if isinstance(v, list):
        return [x for x in v if isinstance(x, str)], None
    if isinstance(v, dict):
        per = {str(k): [x for x in ids if isinstance(x, str)] for k, ids in v.items() if isinstance(ids, list)}
        return [x for ids in per.values() for x in ids], per
    return [], None


def device_checkpoint(doc) -> dict:
    """``{"format": "numa"|"list"|None, "boot_id", "checksum", "entries": [{"pod_uid", "container",
    "resource", "device_ids": [id], "numa": {numa: [id]} | None, "alloc": the stored AllocResp record
    (the collector replaced the base64 by what it decoded) | None}], "registered": {resource: [id]}}``.
    Raises nothing."""
    doc = _dict(doc)
    data = _dict(get(doc, "Data"))
    entries, fmt = [], None
    raw = get(data, "PodDeviceEntries")
    for e in (raw if isinstance(raw, list) else [])[:MAX_ENTRIES]:
        if not isinstance(e, dict):
            continue
        raw_ids, alloc = get(e, "DeviceIDs"), get(e, "AllocResp")
        ids, per = device_ids(raw_ids)
        fmt = fmt or ("numa" if isinstance(raw_ids, dict) else "list" if isinstance(raw_ids, list) else None)
        entries.append({"pod_uid": _str(get(e, "PodUID")), "container": _str(get(e, "ContainerName")),
                        "resource": _str(get(e, "ResourceName")), "device_ids": ids, "numa": per,
                        "alloc": alloc if isinstance(alloc, dict) else None})
    registered = {k: [x for x in v if isinstance(x, str)] for k, v in _dict(get(data, "RegisteredDevices")).items()
                  if isinstance(v, list)}
    return {"format": fmt, "boot_id": _str(get(doc, "BootID")), "checksum": get(doc, "Checksum"),
            "entries": entries, "registered": registered}
