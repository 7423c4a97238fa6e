"""Drive Debian's chromium headless over the DevTools protocol, for tests/test_browser.py.

No third-party client: chromium is started with ``--remote-debugging-pipe``, which speaks the same
JSON messages as the websocket endpoint, each ended by a NUL byte, reading commands on fd 3 and
writing answers and events on fd 4 (the way playwright talks to it). Protocol reference:
https://chromedevtools.github.io/devtools-protocol/ (Target, Page, Network, Runtime, Log, Emulation).

Chromium runs in its own process group, which :meth:`Browser.close` kills, so no renderer or zygote
outlives the test. A chromium that is missing or does not start raises :class:`BrowserError`: the
test fails, it does not skip.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

CHROMIUM = os.environ.get("GPU_FORENSICS_CHROMIUM", "/usr/bin/chromium")
#: run as root in a container: no sandbox; and nothing that talks to the network on its own
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
         "--disable-domain-reliability", "--disable-client-side-phishing-detection",
         "--metrics-recording-only", "--disable-features=Translate,OptimizationHints,MediaRouter",
         "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe"]


class BrowserError(RuntimeError):
    """chromium is missing, did not start, died, answered a command with an error, or timed out."""


#: seconds chromium may take to give its first answer (then :attr:`Browser.timeout` per call)
STARTUP_S = 90.0


class Browser:
    """One headless chromium. Use as a context manager; :meth:`page` opens a tab."""

    def __init__(self, executable: str = CHROMIUM, timeout: float = 20.0):
        if not (shutil.which(executable) or Path(executable).is_file()):
            raise BrowserError(f"{executable} not found: run scripts/browser-deps.sh (apt-get install chromium)")
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="gpu-forensics-chromium-"))
        self._log = (self.profile / "chromium.log").open("wb")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def plumb():  # in the child, before exec: fd 3 = commands in, fd 4 = messages out
            r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)  # above 4 first, so neither clobbers the other
            w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)  # dup2 makes 3 and 4 inheritable; every other fd is not (PEP 446)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, close_fds=False,
            preexec_fn=plumb, start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._answers: dict[int, dict] = {}
        self.events: list[dict] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:  # a cold start on a loaded disk took over 20 s once (CI, I/O pressure): the first answer may wait longer
            self.version = self.call("Browser.getVersion", timeout=max(timeout, STARTUP_S))["product"]
        except BrowserError:
            self.close()
            raise

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cv:
                    self._closed = True
                    self._cv.notify_all()
                return
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            with self._cv:
                for raw in msgs:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._cv.notify_all()

    _closed = False

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        """Send one command and wait for its answer; returns its ``result``. Raises BrowserError."""
        with self._cv:
            self._next_id += 1
            mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise BrowserError(f"{method}: chromium is gone ({e}){self._tail()}") from None
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cv:
            while mid not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise BrowserError(f"{method}: no answer from chromium{self._tail()}")
                self._cv.wait(left)
            ans = self._answers.pop(mid)
        if "error" in ans:
            raise BrowserError(f"{method}: {ans['error'].get('message')}")
        return ans.get("result", {})

    def wait_event(self, method: str, session: str | None = None, timeout: float | None = None) -> dict:
        """Wait for (and consume) the first event ``method`` of ``session``; returns its params."""
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cv:
            while True:
                for i, ev in enumerate(self.events):
                    if ev.get("method") == method and ev.get("sessionId") == session and not ev.get("_seen"):
                        ev["_seen"] = True
                        return ev.get("params", {})
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise BrowserError(f"timed out waiting for {method}{self._tail()}")
                self._cv.wait(left)

    def page(self) -> "Page":
        """A new tab with the Network, Runtime, Log and Page domains on, so that every request and
        console message from its first navigation on is recorded."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=session)
        return Page(self, session)

    def _tail(self) -> str:
        try:
            text = (self.profile / "chromium.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""
        return f"\n--- chromium log (tail) ---\n{text}" if text else ""

    def _strays(self) -> list[int]:
        """Live processes whose command line names this browser's own profile directory."""
        mark, out = str(self.profile).encode(), []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and mark in (d / "cmdline").read_bytes() and \
                        (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(int(d.name))
            except (OSError, IndexError):
                pass
        return out

    def close(self) -> None:
        """Close chromium, then kill its whole process group; remove the profile directory."""
        if self.proc.poll() is None:
            try:
                self.call("Browser.close", timeout=5)
            except BrowserError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for pid in [self.proc.pid] + self._strays():
            try:  # the group: renderers and zygotes; strays: crashpad, which starts its own session
                os.killpg(pid, signal.SIGKILL) if pid == self.proc.pid else os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab, attached in flat mode (its commands and events carry ``session``)."""

    def __init__(self, browser: Browser, session: str):
        self.b, self.session = browser, session

    def call(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        return self.b.call(method, params, self.session, timeout)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event. Raises BrowserError if the navigation fails."""
        r = self.call("Page.navigate", {"url": url})
        if r.get("errorText"):
            raise BrowserError(f"navigating to {url}: {r['errorText']}")
        self.b.wait_event("Page.loadEventFired", self.session)

    def evaluate(self, expression: str):
        """The JSON value of ``expression`` in the page. Raises BrowserError if it throws."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def _events(self, *methods: str) -> list[dict]:
        with self.b._cv:
            return [e["params"] for e in self.b.events if e.get("sessionId") == self.session
                    and e.get("method") in methods]

    def requests(self) -> list[str]:
        """Every URL the page asked for (Network.requestWillBeSent), in order."""
        return [p["request"]["url"] for p in self._events("Network.requestWillBeSent")]

    def console_errors(self) -> list[str]:
        """Uncaught exceptions, console.error/assert calls, and browser log entries at level error
        (which include Content-Security-Policy refusals and failed loads)."""
        out = []
        for p in self._events("Runtime.exceptionThrown"):
            d = p.get("exceptionDetails", {})
            out.append(f"exception: {d.get('text')} {(d.get('exception') or {}).get('description', '')}")
        for p in self._events("Runtime.consoleAPICalled"):
            if p.get("type") in ("error", "assert"):
                out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description")))
                                                                   for a in p.get("args", [])))
        for p in self._events("Log.entryAdded"):
            if p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, path: Path, width: int, media: str = "screen", mobile: bool = False) -> Path:
        """A full-page PNG at ``width`` CSS pixels, with ``media`` (``screen`` or ``print``) emulated."""
        self.call("Emulation.setEmulatedMedia", {"media": "" if media == "screen" else media})
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                         "mobile": mobile})
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": width,
                                                             "height": min(height, 16000), "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def pdf(self, path: Path) -> Path:
        """Print to an A4 PDF, as a reader's "Save as PDF" would."""
        r = self.call("Page.printToPDF", {"paperWidth": 8.27, "paperHeight": 11.69, "printBackground": True},
                      timeout=30)
        path.write_bytes(base64.b64decode(r["data"]))
        return path

    def close(self) -> None:
        self.b.call("Target.closeTarget", {"targetId": self.b.call("Target.getTargetInfo", session=self.session)
                                           ["targetInfo"]["targetId"]})
