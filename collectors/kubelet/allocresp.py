"""The device plugin's answer kept in kubelet's device checkpoint (``AllocResp``), read without protobuf.

``AllocResp`` is the base64 of the plugin's ``ContainerAllocateResponse`` in protobuf's binary wire
format (kubernetes ``pkg/kubelet/cm/devicemanager/pod_devices.go`` marshals it into the checkpoint;
the message is in ``staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto``)::

    message ContainerAllocateResponse {
        map<string, string> envs = 1;          // NVIDIA_VISIBLE_DEVICES=GPU-...
        repeated Mount mounts = 2;             // {container_path = 1, host_path = 2, read_only = 3}
        repeated DeviceSpec devices = 3;       // {container_path = 1, host_path = 2, permissions = 3}
        map<string, string> annotations = 4;
        repeated CDIDevice cdi_devices = 5;    // {name = 1}  (DevicePluginCDIDevices, 1.28+)
    }

A map entry is a message ``{key = 1, value = 2}`` (protobuf language guide, "Maps: backwards
compatibility"). Whether ``devices`` holds any entry is the fact this module is for: the NVIDIA device
plugin passes device specs only with ``--pass-device-specs`` (``PASS_DEVICE_SPECS=true``, the chart's
``compatWithCPUManager``); without them the GPU reaches the container through the envvar and the
runtime hook, outside the OCI spec (docs/sources.md "CPU manager and container updates").

The reader (:func:`fields`) knows only the wire format's four element types (varint 0, 64-bit 1,
length-delimited 2, 32-bit 5; protobuf "Encoding" reference), walks two levels at most, reads
:data:`MAX_BYTES` at most and raises :class:`WireError` for anything else: a hostile checkpoint
gives an error, never a loop, a deep recursion or a large allocation.
"""
from __future__ import annotations

import base64
import binascii

MAX_BYTES = 1 << 20       #: decoded AllocResp bytes read at most (a real one is a few hundred)
MAX_FIELDS = 4096         #: elements read from one message at most


class WireError(ValueError):
    """The bytes are not a protobuf message this reader can walk."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """``(value, next index)`` of the base-128 varint at ``buf[i]`` (at most 10 bytes)."""
    value = 0
    for shift in range(0, 70, 7):
        if i >= len(buf):
            raise WireError("a varint runs past the end")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
    raise WireError("a varint longer than 10 bytes")


def fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """``[(field number, wire type, value)]`` of one message: an int for wire types 0, 1 and 5, the bytes
    for type 2. Raises :class:`WireError` for a group (types 3, 4), an unknown type, a length past the
    end, field number 0 or more than :data:`MAX_FIELDS` elements."""
    out: list[tuple[int, int, int | bytes]] = []
    i = 0
    while i < len(buf):
        if len(out) >= MAX_FIELDS:
            raise WireError(f"more than {MAX_FIELDS} fields")
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if i + size > len(buf):
                raise WireError("a fixed-size field runs past the end")
            value, i = int.from_bytes(buf[i:i + size], "little"), i + size
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise WireError("a length-delimited field runs past the end")
            value, i = buf[i:i + size], i + size
        else:
            raise WireError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _text(value) -> str:
    if not isinstance(value, bytes):
        raise WireError("a string field that is not length-delimited")
    return value.decode("utf-8", "replace")


def _message(value, names: dict[int, str]) -> dict:
    """A small message of string (and bool) fields, by field number -> name; others are left out."""
    if not isinstance(value, bytes):
        raise WireError("a message field that is not length-delimited")
    out: dict = {}
    for number, wire, v in fields(value):
        if number in names:
            out[names[number]] = bool(v) if wire == 0 else _text(v)
    return out


def decode(b64: str) -> dict:
    """``ContainerAllocateResponse`` from the checkpoint's base64 text: ``{"envs": {name: value},
    "mounts": [{container_path, host_path, read_only}], "devices": [{container_path, host_path,
    permissions}], "annotations": {name: value}, "cdi_devices": [name]}`` (raw values: redact before
    storing). Raises :class:`WireError` (a ``ValueError``) for text that is not base64 or bytes that
    are not such a message, or over :data:`MAX_BYTES`."""
    if not isinstance(b64, str) or len(b64) > MAX_BYTES * 4 // 3 + 4:
        raise WireError("not a string of at most 1 MiB of base64")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise WireError(f"not base64: {e}") from None
    out: dict = {"envs": {}, "mounts": [], "devices": [], "annotations": {}, "cdi_devices": []}
    for number, _wire, value in fields(raw):
        if number in (1, 4):
            entry = _message(value, {1: "key", 2: "value"})
            out["envs" if number == 1 else "annotations"][entry.get("key", "")] = entry.get("value", "")
        elif number == 2:
            out["mounts"].append(_message(value, {1: "container_path", 2: "host_path", 3: "read_only"}))
        elif number == 3:
            out["devices"].append(_message(value, {1: "container_path", 2: "host_path", 3: "permissions"}))
        elif number == 5:
            out["cdi_devices"].append(_message(value, {1: "name"}).get("name"))
    return out
