"""The copy-paste commands the causes' remedies give, built through :mod:`forensics.findings.commands`
(the one home for evidence in a command): a node, namespace or pod name enters a command only when it
has its Kubernetes grammar, shell-quoted; a PCI address only in its own shape; anything else from the
evidence (which may be hostile: issue 27) is left out and a placeholder stands in its place. Every
command only reads, or names what it changes."""
from __future__ import annotations

from ..commands import Ev, command, held, valid


def node_name(node) -> str:
    """The node's name for a command, or the placeholder ``NODE`` when it is not a DNS-1123 subdomain."""
    return node if valid("node", node) else "NODE"


def recreate(rows: list[dict]) -> tuple[list[str], list[str]]:
    """``(commands, held)``: ``kubectl delete pod -n NS POD`` for each pod of ``rows`` (exposure rows) whose
    names have their grammar (the controller makes a new pod with fresh device rules), and the
    :func:`forensics.findings.commands.held` sentences of the others, which name them as data."""
    pods = sorted({(r.get("namespace"), r.get("pod")) for r in rows if r.get("pod") is not None}, key=str)
    words = [("kubectl delete pod -n", Ev("namespace", ns), Ev("pod", pod)) for ns, pod in pods]
    cmds = [c for w in words if (c := command(*w))]
    return cmds, list(dict.fromkeys(h for w in words for h in held(*w)))


def drain(node) -> list[str]:
    """Cordon and drain the node (its GPU needs a reset or the node a reboot)."""
    n = node_name(node)
    return [f"kubectl cordon {n}", f"kubectl drain {n} --ignore-daemonsets --delete-emptydir-data"]


def pci(addr) -> str | None:
    """A PCI address as a command may carry it (``0000:3b:00.0``), else None."""
    a = str(addr or "").lower()
    return a if valid("pci", a) else None
