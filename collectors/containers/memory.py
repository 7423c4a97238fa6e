"""A container's memory cgroup counters: how often it hit its limit and whether the kernel OOM-killed in it.

- cgroup v2 ``memory.events`` (kernel ``Documentation/admin-guide/cgroup-v2.rst``, "memory.events";
  written by ``__memory_events_show`` in ``mm/memcontrol.c`` as ``name value`` lines): ``low``, ``high``,
  ``max``, ``oom`` (the cgroup's usage was about to go over ``max`` and the OOM killer ran or would have),
  ``oom_kill`` (processes killed by it), ``oom_group_kill`` (5.16+), and newer keys (``sock_throttled``,
  6.11+) kept as they come; the counts include the cgroup's descendants;
- cgroup v1 ``memory.oom_control`` (kernel ``Documentation/admin-guide/cgroup-v1/memory.rst`` 10; as read on
  this machine: ``oom_kill_disable 0``, ``under_oom 0``, ``oom_kill 0``; ``oom_kill`` since 4.13) and
  ``memory.failcnt`` (how often usage hit the limit).

:func:`memory` gives the record's ``memory`` (shape in :mod:`collectors.containers`); the files read are
stored beside the record (``memory.events``, ``memory.oom_control``, ``memory.failcnt``).
"""
from __future__ import annotations

from forensics.artifact import Status

LIMIT = 64 << 10  #: bytes of one counter file read (a few hundred in practice)


def parse_counters(text: str) -> dict[str, int]:
    """``name value`` lines -> ``{name: int}``; a line that is not one name and one integer is skipped."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _read(ctx, src: str, rel: str) -> tuple[str | None, str]:
    """``(text stored, outcome)`` of one cgroup file: the outcome is the artifact's status, with its
    message when it is neither collected nor absent."""
    kept: list[bytes] = []
    art = ctx.writer.copy(ctx.root, src, rel, limit=LIMIT, keep=kept)
    said = art.status.value + (f" ({art.message})" if art.status in (Status.UNREADABLE, Status.ERROR) else "")
    if art.status not in (Status.COLLECTED, Status.TRUNCATED):
        return None, said
    return b"".join(kept).decode("utf-8", "replace"), said


def memory(ctx, rel: str, paths: dict) -> dict:
    """The record's ``memory`` for a container whose cgroup directories are ``paths`` (runc's
    ``cgroup_paths``: controller -> host path; ``""`` the unified v2 directory): v1 when a ``memory``
    controller path is known, else v2 ``memory.events`` of the unified directory; every count None
    when its file was not read (``status`` says why) or does not have it. Raises nothing."""
    out = {"oom_kill": None, "oom": None, "oom_group_kill": None, "source": None, "status": "no memory cgroup path "
           "known (no runc state and no live process)", "path": None, "events": None, "failcnt": None}
    if paths.get("memory"):
        path, name = paths["memory"], "memory.oom_control"
    elif paths.get(""):
        path, name = paths[""], "memory.events"
    else:
        return out
    text, status = _read(ctx, f"{path}/{name}", f"{rel}/{name}")
    out.update(source=name, status=status, path=path)
    if text is not None:
        events = parse_counters(text)
        # v1's under_oom is a state, not a count: v1 has no "oom" counter
        out.update(events=events, oom_kill=events.get("oom_kill"), oom_group_kill=events.get("oom_group_kill"),
                   oom=events.get("oom") if name == "memory.events" else None)
    if name == "memory.oom_control":
        fail, _ = _read(ctx, f"{path}/memory.failcnt", f"{rel}/memory.failcnt")
        if fail is not None and fail.strip().isdigit():
            out["failcnt"] = int(fail.strip())
    return out
