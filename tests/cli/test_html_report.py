"""The HTML report after a simulated study: one self-contained file that opens offline in headless Chromium
(Debian's package) with every plot drawn, and that makes no network request (every request the page makes,
recorded through the DevTools protocol)."""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import struct
import subprocess
import time
import zlib

import pytest

from .helpers import autotune, space_file

PLOTS = ("history", "prompts", "acceptance", "knobs", "intervals", "timeline")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.chromium


@pytest.fixture(scope="module")
def html_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    space = space_file(tmp, base="llama-8b-eagle3.yaml")
    studies = tmp / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "14", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    path = tmp / "report.html"
    r = autotune("report", str(space), "--simulate", "--html", str(path), "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    return path


def test_the_file_loads_nothing_from_a_network(html_report):
    text = html_report.read_text()
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "", text, flags=re.S | re.I)  # plotly.js itself, inlined
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", markup, re.I)
    assert not re.search(r"<script\b[^>]*\bsrc=", text, re.I) and "<link" not in markup.lower()
    assert "@import" not in markup
    for key in PLOTS:
        assert f'id="plot-{key}"' in text
    assert "SIMULATED study" in text and text.count("[simulated hardware time]") >= len(PLOTS)


class _Browser:
    """Headless Chromium driven through the DevTools protocol over ``--remote-debugging-pipe`` (fds 3 and 4, JSON
    messages ending in NUL): every request a page makes is seen as ``Network.requestWillBeSent``, whatever the
    browser itself contacts in the background (its sign-in and search services) is not a page request."""

    def __init__(self, tmp_path) -> None:
        if CHROMIUM is None:
            pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def _fds() -> None:  # in the child: its fd 3 reads our commands, fd 4 writes its answers
            r, w = os.dup(to_r), os.dup(from_w)  # (to_r or from_w may be 3 or 4 themselves)
            os.dup2(r, 3)
            os.dup2(w, 4)

        argv = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-extensions",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost",  # nothing leaves this machine anyway
            f"--user-data-dir={tmp_path / 'profile'}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            argv,
            preexec_fn=_fds,
            pass_fds=(3, 4),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0, "the browser did not answer in time"
            ready, _, _ = select.select([self._from_r], [], [], left)
            if ready:
                chunk = os.read(self._from_r, 1 << 20)
                assert chunk, "the browser exited"
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                assert "error" not in m, m
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def open(self, url: str, width: int = 1280, height: int = 4200) -> str:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Network.enable", session=session)
        self.call("Page.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired")
        return session

    def page_requests(self) -> list[str]:
        """URLs the page asked for, beyond its own file and inline data."""
        urls = [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]
        return [u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:"))]

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        os.close(self._from_r)


def _png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    width, height, depth, colour, _c, _f, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


@needs_chromium
def test_every_plot_is_drawn_in_headless_chromium_offline(html_report, tmp_path):
    browser = _Browser(tmp_path)
    try:
        # the recorder sees what a page loads: a page with one remote image is caught
        remote = tmp_path / "remote.html"
        remote.write_text("<!doctype html><img src='http://cdn.example.invalid/x.png'>")
        browser.open(remote.as_uri())
        assert browser.page_requests() == ["http://cdn.example.invalid/x.png"]
        session = browser.open(html_report.as_uri())
        time.sleep(1.0)  # plotly draws on load; let any late request show
        drawn = browser.call(
            "Runtime.evaluate",
            {
                "expression": "JSON.stringify(Array.from(document.querySelectorAll('div[id^=plot-]')).map(d => "
                "[d.id, d.querySelectorAll('.main-svg').length, d.querySelectorAll('.point').length]))",
                "returnByValue": True,
            },
            session=session,
        )["result"]["value"]
        shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session=session)["data"])
        requests = browser.page_requests()
    finally:
        browser.close()
    assert requests == [], f"the report made network requests: {requests}"
    plots = {key: (svgs, points) for key, svgs, points in json.loads(drawn)}
    assert sorted(plots) == sorted(f"plot-{k}" for k in PLOTS)
    for key, (svgs, points) in plots.items():
        assert svgs >= 1, f"{key} was not drawn"
        assert points >= 1, f"{key} has no data drawn"
    width, height, bpp, rows = _png_pixels(shot)
    assert (width, height) == (1280, 4200)
    step = 7
    samples = [row[x * bpp : x * bpp + 3] for row in rows[::step] for x in range(0, width, step)]
    not_white = sum(1 for px in samples if min(px) < 235)
    blue = sum(1 for px in samples if px[2] > 150 and px[0] < 110)  # the trials' markers and bars (#3366cc)
    assert not_white > 0.03 * len(samples), "the screenshot is blank"
    assert blue > 100, "no plot colours in the screenshot"
