"""The form of the metrics collector's URL options (``--prometheus``, ``--dcgm-url``): what a typo is
told (one line with the form wanted, the value shown through :func:`forensics.redact_url.redact_url`)."""
from __future__ import annotations

from urllib.parse import urlsplit

from forensics.redact import redact_url


#: the form each URL option wants, said when a value is not a URL
URL_EXAMPLES = {"--prometheus": "http://prometheus:9090", "--dcgm-url": "http://dcgm-exporter:9400/metrics"}


def url_problem(flag: str, url: str | None) -> str | None:
    """``None`` when ``url`` is ``http(s)://HOST...`` or ``file://PATH`` (a recorded copy), else one line
    naming the form ``flag`` wants (the value shown through :func:`redact_url`); a value without a
    scheme that is a URL once ``http://`` is put before it (``localhost:9090``) is told that one. A malformed URL does not
    stop the collection: :func:`acquire` records it as this option's ``error`` artifact, and the other
    sources are still collected."""
    if not url:
        return None
    try:
        p = urlsplit(url)
        p.port  # noqa: B018 - a port that is not a number in 0..65535 raises ValueError
        if (p.scheme in ("http", "https") and p.hostname) or (p.scheme == "file" and p.path):
            return None
    except ValueError:
        pass
    if "://" not in url and not url.startswith("/") and not any(c.isspace() for c in url):  # localhost:9090, prometheus.monitoring:9090/prom
        fixed = redact_url("http://" + url, keep_names=True)
        if fixed != "<redacted>" and url_problem(flag, "http://" + url) is None:
            return f"{flag} wants a URL with its scheme: did you mean {flag} {fixed} (https:// for TLS)?"
    shown = redact_url(url, keep_names=True)
    return (f"{flag} wants a URL like {URL_EXAMPLES[flag]} (or file://DIR of recorded answers)"
            + ("" if shown == "<redacted>" else f"; got {shown}"))


def shown_source(flag: str, url: str) -> str:
    """The artifact source of a URL option's value: the value with its credentials redacted, or the
    option's name when the value is too malformed to show even that (never a bare ``<redacted>``)."""
    shown = redact_url(url)
    return flag if shown == "<redacted>" else shown
