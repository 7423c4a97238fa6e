"""The cause rules: one module per cause, each holding its :class:`~forensics.findings.verdicts.Rule` (name,
title, the symptom classes it explains, the evidence it needs, how it reaches each verdict, its sentence
and its remedy), and :data:`RULES`, the one registry the correlator iterates for every incident.

How to add a cause: one module here whose ``RULE`` is a :class:`~forensics.findings.verdicts.Rule` (its
``judge`` answers :class:`~forensics.findings.verdicts.Happened` and
:class:`~forensics.findings.verdicts.Mechanism` and lets :func:`~forensics.findings.verdicts.weigh` give
the verdict), one line in :data:`RULES`, and one test per verdict (tests/test_causes.py shows the shape).
The correlator, the headline and the reports name no cause: they read the registry.

Order: when two causes are equally well supported the headline names the earlier one, so the causes that
need the node's hardware or driver looked at come first, then the set-up faults, then the pod's own, then
the context (packages, reboots, restarts) that is rarely the cause itself.
"""
from __future__ import annotations

from ..verdicts import Rule
from . import (app_fault, cdi, cpu_manager, driver_ready, fabric, hardware, mig, mismatch, oom, reboot, reload, restart,
               transaction, unhealthy)

#: every cause rule by its kind, in the order the headline prefers when support is equal
RULES: dict[str, Rule] = {r.kind: r for r in (
    hardware.RULE,
    mismatch.RULE,
    fabric.RULE,
    driver_ready.RULE,
    cdi.RULE,
    reload.RULE,
    cpu_manager.RULE,
    mig.RULE,
    app_fault.RULE,
    oom.RULE,
    unhealthy.RULE,
    transaction.RULE,
    restart.RULE,
    reboot.RULE,
)}
#: how the report names each cause
TITLES = {k: r.title for k, r in RULES.items()}
