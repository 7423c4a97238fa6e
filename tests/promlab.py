"""A real Prometheus for tests and for recording the sample's answers: write OpenMetrics history,
backfill it with promtool, start prometheus on 127.0.0.1, stop it.

Used by tests/test_metrics.py and samples/record_prometheus.py. Nothing here is mocked: the history
goes through ``promtool tsdb create-blocks-from openmetrics`` into TSDB blocks, and a real
``prometheus`` process serves them (docs/sources.md "Prometheus" lists the input rules this
module follows: second timestamps, time-sorted series, ``# EOF``, no blank lines).

Install the binaries with ``scripts/prometheus-deps.sh`` (Debian's ``prometheus`` package, which
includes promtool). A missing binary raises ``PromLabError``: tests fail, they never skip.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import requests


class PromLabError(RuntimeError):
    """prometheus/promtool missing, a backfill that failed, or a server that did not come up."""


def binary(name: str) -> str:
    """Path of ``prometheus`` or ``promtool``; raises :class:`PromLabError` when it is not on PATH."""
    path = shutil.which(name)
    if not path:
        raise PromLabError(f"{name} not found on PATH: run scripts/prometheus-deps.sh "
                           f"(installs Debian's prometheus package, which includes promtool)")
    return path


@dataclass
class Series:
    """One series to backfill: metric name, labels, and ``(unix seconds, value)`` samples in time order."""

    name: str
    labels: dict
    samples: Iterable[tuple[float, float]]


def scrapes(start: float, end: float, every: float, value: float | None = None, fn=None) -> Iterator[tuple]:
    """Samples every ``every`` seconds in ``[start, end]`` (both inclusive when aligned): the constant
    ``value``, or ``fn(t)``."""
    t = start
    while t <= end:
        yield t, (fn(t) if fn else value)
        t += every


def _labels(labels: dict) -> str:
    def esc(v):
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items())) + "}" if labels else ""


def _num(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() else repr(float(x))


def write_openmetrics(path: str | os.PathLike, series: list[Series]) -> int:
    """Write ``series`` as an OpenMetrics text file that promtool accepts and return the sample count.

    Families are grouped (one ``# TYPE … gauge`` each), each series' samples are written in time order
    with second-resolution timestamps, and the file ends with ``# EOF``. Raises ``ValueError`` for a
    series whose samples go back in time or repeat a timestamp, because promtool would drop those
    silently (docs/sources.md "Prometheus").
    """
    families: dict[str, list[Series]] = {}
    for s in series:
        families.setdefault(s.name, []).append(s)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for name, members in families.items():
            f.write(f"# TYPE {name} gauge\n")
            for s in members:
                lab, last = _labels(s.labels), None
                for t, v in s.samples:
                    if last is not None and t <= last:
                        raise ValueError(f"{name}{lab}: sample at {t} is not after {last}")
                    f.write(f"{name}{lab} {_num(v)} {_num(t)}\n")
                    last, n = t, n + 1
        f.write("# EOF\n")
    return n


def _promtool_has_max_block_duration() -> bool:
    h = subprocess.run([binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", "--help"],
                       capture_output=True, text=True)
    return "--max-block-duration" in h.stdout + h.stderr


def backfill(om_file: str | os.PathLike, out_dir: str | os.PathLike, max_block_duration: str = "31d") -> Path:
    """Turn one OpenMetrics file into TSDB blocks in ``out_dir`` with promtool and return ``out_dir``.

    ``--max-block-duration`` is passed when this promtool has it (newer releases). Debian bookworm's
    2.42 has not: it writes 2 h blocks and re-reads the whole input for every block, so a long history
    should go through :func:`backfill_series`, which splits it by day first. Raises
    :class:`PromLabError` when promtool fails.
    """
    cmd = [binary("promtool"), "tsdb", "create-blocks-from", "openmetrics"]
    if _promtool_has_max_block_duration():
        cmd.append(f"--max-block-duration={max_block_duration}")
    p = subprocess.run(cmd + ["--quiet", str(om_file), str(out_dir)], capture_output=True, text=True)
    if p.returncode != 0:
        raise PromLabError(f"promtool failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return Path(out_dir)


def backfill_series(series: list[Series], out_dir: str | os.PathLike, workdir: str | os.PathLike,
                    chunk_s: int = 86400, workers: int = 4) -> tuple[Path, int]:
    """Backfill ``series`` into blocks in ``out_dir`` and return ``(out_dir, sample count)``.

    With a promtool that has ``--max-block-duration`` this is one file and one run. Without it (2.42)
    the history is cut into ``chunk_s`` pieces, one OpenMetrics file each (in ``workdir``), so that
    each promtool run only re-reads a day's worth per 2 h block: seconds instead of hours for months.
    """
    out_dir, workdir = Path(out_dir), Path(workdir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if _promtool_has_max_block_duration():
        n = write_openmetrics(workdir / "history.om", series)
        return backfill(workdir / "history.om", out_dir), n
    pieces: dict[int, list[Series]] = {}
    n = 0
    for s in series:
        by_chunk: dict[int, list] = {}
        for t, v in s.samples:
            by_chunk.setdefault(int(t // chunk_s), []).append((t, v))
        for k, samples in by_chunk.items():
            pieces.setdefault(k, []).append(Series(s.name, s.labels, samples))
    files = []
    for k, members in sorted(pieces.items()):
        files.append(workdir / f"history-{k}.om")
        n += write_openmetrics(files[-1], members)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda f: backfill(f, out_dir), files))
    return out_dir, n


def check_rules(path: str | os.PathLike) -> subprocess.CompletedProcess:
    """Run ``promtool check rules PATH`` and return the completed process (not raising)."""
    return subprocess.run([binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PromServer:
    """A prometheus process serving copied blocks. Use as a context manager, or call :meth:`start`
    and :meth:`stop`.

    ``blocks`` is copied first, because prometheus compacts and rewrites its data directory.
    ``retention`` is ``--storage.tsdb.retention.time`` (counted from the newest block, not from now);
    ``rule_files`` are loaded and evaluated every ``eval_interval``; no scrape jobs are configured.
    ``web_config`` is the text of a ``--web.config.file`` (TLS, basic auth); then ``scheme`` and
    ``client`` (requests keyword arguments: ``auth``, ``verify``) say how to reach it.
    """

    blocks: Path
    retention: str = "100y"
    rule_files: list[Path] = field(default_factory=list)
    eval_interval: str = "1s"
    workdir: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    web_config: str | None = None
    scheme: str = "http"
    client: dict = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "PromServer":
        """Start prometheus and wait until it is ready and every rule group was evaluated.
        Raises :class:`PromLabError` (with the log tail) when it exits or is not ready in ``timeout`` s."""
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="promlab-")
            self.workdir = Path(self._tmp.name)
        data = self.workdir / "data"
        if data.exists():
            shutil.rmtree(data)
        shutil.copytree(self.blocks, data)
        rules = []
        for i, r in enumerate(self.rule_files):
            dst = self.workdir / f"rules-{i}.yml"
            shutil.copy(r, dst)
            rules.append(dst.name)
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(f"global:\n  evaluation_interval: {self.eval_interval}\n"
                       + ("rule_files:\n" + "".join(f"  - {r}\n" for r in rules) if rules else "")
                       + "scrape_configs: []\n")
        self.port = self.port or free_port()
        self.log = self.workdir / "prometheus.log"
        cmd = [binary("prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={data}",
               f"--storage.tsdb.retention.time={self.retention}", f"--web.listen-address=127.0.0.1:{self.port}",
               *self.extra_args]
        if self.web_config:
            (self.workdir / "web.yml").write_text(self.web_config)
            cmd.append(f"--web.config.file={self.workdir / 'web.yml'}")
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PromLabError(f"prometheus exited {self.proc.returncode}: {self._tail()}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise PromLabError(f"prometheus not ready within {timeout} s: {self._tail()}")

    def _ready(self) -> bool:
        try:
            if requests.get(self.url + "/-/ready", timeout=2, **self.client).status_code != 200:
                return False
            if not self.rule_files:
                return True
            groups = requests.get(self.url + "/api/v1/rules", timeout=5, **self.client).json()["data"]["groups"]
            return bool(groups) and all(not g["lastEvaluation"].startswith("0001") for g in groups)
        except (requests.RequestException, ValueError, KeyError):
            return False

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the process (SIGTERM, then SIGKILL after 20 s) and remove a temporary workdir."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_tmp", None):
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
