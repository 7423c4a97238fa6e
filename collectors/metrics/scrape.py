"""The one scrape of dcgm-exporter's own ``/metrics`` (``--dcgm-url``), read back: did it answer, and for
which GPUs (the ``UUID`` or ``uuid`` label of its ``DCGM_FI_*`` samples, exposition format)."""
from __future__ import annotations

import re

from forensics.artifact import Status
from forensics.bundle import Bundle


def read(bundle: Bundle) -> dict | None:
    """What the scrape showed: ``{"answered": True, "dcgm_samples": int, "gpus": [uuid], "artifact", "source"}``,
    ``{"answered": False, "error", "source", "artifact"}``, or None when no scrape was made."""
    recs = [a for a in bundle.artifacts() if a.method == "http-get"]
    if not recs:
        return None
    a = recs[-1]
    if a.status != Status.COLLECTED:
        return {"answered": False, "error": a.message, "source": a.source, "artifact": a.path}
    text = bundle.path(a.path).read_text(errors="replace")
    samples = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_")]
    uuids = sorted(set(re.findall(r'(?:UUID|uuid)="([^"]+)"', "\n".join(samples))))
    return {"answered": True, "dcgm_samples": len(samples), "gpus": uuids, "artifact": a.path, "source": a.source}
