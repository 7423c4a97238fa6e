"""The collector contract: what ``acquire(ctx)`` gets and what ``read(bundle, node)`` returns.

A collector is a module (or package) in ``collectors/`` listed once in ``collectors.COLLECTORS``. It has
``acquire(ctx: CollectContext) -> None`` (host -> bundle, read-only on the host, through
:mod:`forensics.hostfs`; every artifact recorded with its status) and ``read(bundle, node) -> Reading``
(bundle -> events, coverage and facts). Collectors import only this core; they give facts and never judge.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from .bundle import BundleWriter
from .events import Coverage, Event, NodeFacts


@dataclass
class CollectContext:
    """What a collector's ``acquire(ctx)`` gets.

    ``root`` is the host's root as this process sees it (``/`` on the node, ``/host`` in a pod);
    ``journal_dirs`` are extra journal directories or files given with ``--journal-dir`` (paths on
    this machine, not under ``root``); ``since`` (UTC) limits the journal scan; ``facts`` is the
    manifest's node section, filled by the node collector first and read by later ones.
    """

    root: Path
    writer: BundleWriter
    journal_dirs: list[Path] = field(default_factory=list)
    since: datetime | None = None
    facts: dict = field(default_factory=dict)
    log: Callable[[str], None] = lambda msg: None
    #: extra containerd state directories (besides <root>/run/containerd), e.g. a lab's --state
    containerd_state_dirs: list[Path] = field(default_factory=list)
    #: --probe: open() each GPU device node inside each container (opt-in)
    probe: bool = False
    #: Prometheus / dcgm-exporter endpoints (--prometheus, --dcgm-url); None when not given
    prometheus: str | None = None
    dcgm_url: str | None = None
    #: Prometheus credentials: the NAME of an env variable, or a file, holding "Bearer X" / "Basic u:p";
    #: never written to the bundle. ``prometheus_ca``: a PEM CA bundle for its TLS
    prometheus_token_env: str | None = None
    prometheus_token_file: str | None = None
    prometheus_ca: str | None = None
    #: --kube: read the node's cluster-side context from the API server (collectors/kube.py, read-only);
    #: ``kubeconfig``: --kubeconfig (None: in-cluster, then the default kubeconfig)
    kube: bool = False
    kubeconfig: str | None = None
    #: time.monotonic() value after which collectors stop reading and mark what they hold truncated
    deadline: float | None = None
    #: redact secret values (container env, credential annotations, URL credentials); --no-redact clears it
    redact: bool = True

    def expired(self) -> bool:
        """True once the run's time budget (``--time-budget``) is spent."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    @property
    def live(self) -> bool:
        """True when collecting from the running host itself (``--root /``)."""
        return os.path.realpath(self.root) == "/"


@dataclass
class Reading:
    """What one collector's ``read()`` returns: events, the coverage of each of its sources, and
    facts (a free-form dict merged into the analysis, e.g. ``systemd_version``)."""

    events: list[Event] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    #: problems met while reading stored artifacts: ``{"artifact": REL, "message": str}``
    problems: list[dict] = field(default_factory=list)


@dataclass
class Readings:
    """What every collector's ``read()`` gave for one bundle, merged (``forensics.ops.pipeline.read_all``):
    the node facts, the events of all sources sorted by time, every source's coverage, the facts of all
    readings merged into one dict (a later collector's key replaces an earlier one's), and the problems
    (a collector whose ``read`` raised is one: ``{"artifact": collector name, "message"}``)."""

    node: NodeFacts
    events: list[Event] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    problems: list[dict] = field(default_factory=list)
