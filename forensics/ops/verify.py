"""``verify``: every hash of a bundle checked, and the manifest's own SHA-256 printed and compared with
the ticket's (``--expect``); ``analyze`` runs the same check first (:func:`integrity_of`)."""
from __future__ import annotations

from ..bundle import Bundle, verify
from ..words import count_of
from .exits import EXIT_INVALID, EXIT_OK


def integrity_of(b: Bundle, expect: str | None) -> dict:
    """``verify`` of the open bundle ``b``, and the manifest hash against the ticket's (``--expect``):
    ``{"verified", "problems", "manifest_sha256", "expected_sha256"}`` (analysis.json's ``integrity``)."""
    problems = verify(b)
    if expect and expect != b.manifest_sha256:
        problems.insert(0, f"manifest: manifest.json SHA-256 is {b.manifest_sha256}, the ticket says {expect}")
    return {"verified": not problems, "problems": problems, "manifest_sha256": b.manifest_sha256,
            "expected_sha256": expect}


def cmd_verify(args) -> int:
    """``verify``: every hash of the bundle, and the manifest's own SHA-256 printed (and compared with
    ``--expect``). Exit 3 on any problem."""
    b = Bundle.open(args.bundle, strict=False)
    try:
        integrity = integrity_of(b, args.expect)
    finally:
        b.close()
    print(f"manifest.json sha256: {integrity['manifest_sha256']}")
    problems = integrity["problems"]
    if problems:
        for p in problems:
            print(p)
        print(f"{args.bundle}: bundle does NOT match its manifest{' or the ticket' if args.expect else ''} "
              f"({count_of(len(problems), 'problem')})")
        return EXIT_INVALID
    print(f"{args.bundle}: OK, every artifact matches its SHA-256; " + (
        "manifest.json matches the ticket's SHA-256" if args.expect else
        "compare the manifest.json SHA-256 above with the ticket's: a rewritten and resealed bundle verifies too"))
    return EXIT_OK
