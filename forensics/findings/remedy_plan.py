"""The one remedy that fits this node, out of the exposure's remedies (forensics/findings/remedies.py):
the report leads with it, and names the others, each with when it applies, behind a fold (issue 28).

The exposure lists every change that would put this stack's GPUs into the OCI spec, in its own order,
some of them alternatives ("Or: ..."), some needing another step first, and the stack-neutral steps that
follow whichever is chosen (recreate the containers). :func:`plan` picks without reordering that list:
the first stack-specific remedy that needs nothing else first (its ``needs`` is empty or says "nothing
else"), else the first that is not an alternative, else the first; the remedies right after it that are its next
steps (``follows``: Docker's and Podman's CDI, where the spec alone changes nothing until the engine and the
containers use it) and the stack-neutral steps follow it; every other remedy is an alternative, worded with
when it applies (its ``needs``).
"""
from __future__ import annotations

from .stack_remedies import EVERY_STACK as NEUTRAL  # how remedies.py labels a remedy that fits any stack
#: how remedies.py opens the title of an alternative to the remedy before it
ALTERNATIVE = "Or: "


def _free(r: dict) -> bool:
    needs = str(r.get("needs") or "").strip().lower()
    return not needs or needs.startswith("nothing")


def title(r: dict) -> str:
    """The remedy's title without the list's "Or: " joint (the plan says which is an alternative)."""
    what = str(r.get("what") or "")
    rest = what[len(ALTERNATIVE):] if what.startswith(ALTERNATIVE) else what
    return rest[:1].upper() + rest[1:]


def plan(remedies: list[dict] | None) -> dict | None:
    """``{"fix": remedy, "then": [remedy], "others": [remedy + {"when": str}]}`` from the exposure's
    ``remedies`` (each ``{"what", "stack", "change", "needs", "breaks", "why", "order"}``; titles given
    without "Or: "), or ``None`` when there is none. ``fix`` is the one change that fits this node
    (module docstring); ``then`` its next steps and the stack-neutral steps after it, in their order; ``others`` the rest,
    each with ``when``: "applies if the node has: <needs>" or "applies on this stack too". With only stack-neutral
    remedies, the first of them is the fix."""
    rows = [r for r in remedies or [] if isinstance(r, dict)]
    if not rows:
        return None
    specific = [r for r in rows if r.get("stack") != NEUTRAL]
    pool = specific or rows
    fix = (next((r for r in pool if _free(r)), None)
           or next((r for r in pool if not str(r.get("what") or "").startswith(ALTERNATIVE)), None) or pool[0])
    steps = []  # the fix's own next steps (Docker's and Podman's CDI: spec, engine, containers), in order
    for r in (pool[pool.index(fix) + 1:] if fix in specific else []):
        if not r.get("follows"):
            break
        steps.append(r)
    then = steps + [r for r in rows if r.get("stack") == NEUTRAL and r is not fix]
    others = [{**r, "what": title(r),
               "when": f"applies if the node has: {r['needs']}" if r.get("needs") else "applies on this stack too"}
              for r in specific if r is not fix and r not in steps]
    return {"fix": {**fix, "what": title(fix)}, "then": then, "others": others}
