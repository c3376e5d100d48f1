"""The HTML report after a simulated study: one self-contained file that opens offline in headless Chromium
(Debian's package) with every plot drawn, and that makes no network request (recorded through a proxy)."""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import zlib

import pytest

from .helpers import autotune, space_file

PLOTS = ("history", "prompts", "acceptance", "knobs", "intervals", "timeline")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.chromium
#: hosts Chromium contacts by itself, whatever the page (seen here on an empty page: sign-in, search, network time)
BROWSER_OWN = {"accounts.google.com", "www.google.com", "clients2.google.com"}


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


class _Recorder:
    """A proxy that answers nothing and records every connection a browser makes through it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.seen.append(conn.recv(2048).split(b"\r\n", 1)[0])
                except OSError:
                    self.seen.append(b"?")

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def _chromium(args: list[str], proxy_port: int, tmp_path) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
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
        "--metrics-recording-only",
        "--hide-scrollbars",
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=20000",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL, cwd=tmp_path)


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


def _hosts(seen: list[bytes]) -> set[str]:
    """``CONNECT host:443`` / ``GET http://host/...`` -> host."""
    out = set()
    for line in seen:
        target = line.split(b" ")[1].decode() if b" " in line else "?"
        out.add(re.sub(r"^https?://", "", target).split("/")[0].split(":")[0])
    return out


def _requests_of(page, tmp_path, *args: str) -> tuple[set[str], subprocess.CompletedProcess]:
    proxy = _Recorder()
    try:
        r = _chromium([*args, page.as_uri()], proxy.port, tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
    finally:
        proxy.close()
    return _hosts(proxy.seen), r


@needs_chromium
def test_every_plot_is_drawn_in_headless_chromium_offline(html_report, tmp_path):
    # Chromium itself contacts its vendor's services even on an empty page (sign-in, search): that is the floor.
    # The recorder sees what a page loads: a page with one remote image is caught.
    blank, remote = tmp_path / "blank.html", tmp_path / "remote.html"
    blank.write_text("<!doctype html><title>blank</title>")
    remote.write_text("<!doctype html><img src='http://cdn.example.invalid/x.png'>")
    floor, _ = _requests_of(blank, tmp_path, "--dump-dom")
    floor |= BROWSER_OWN
    caught, _ = _requests_of(remote, tmp_path, "--dump-dom")
    assert "cdn.example.invalid" in caught
    hosts, dom = _requests_of(html_report, tmp_path, "--dump-dom")
    shot = tmp_path / "shot.png"
    hosts_shot, r = _requests_of(html_report, tmp_path, "--window-size=1280,4200", f"--screenshot={shot}")
    assert shot.exists(), r.stderr[-2000:]
    assert (hosts | hosts_shot) <= floor, f"the report made network requests: {sorted((hosts | hosts_shot) - floor)}"
    html = dom.stdout
    for key in PLOTS:
        start = html.index(f'id="plot-{key}"')
        nxt = [html.find(f'id="plot-{k}"', start + 1) for k in PLOTS]
        end = min([i for i in nxt if i > start] or [len(html)])
        section = html[start:end]
        assert 'class="main-svg"' in section, f"plot {key} was not drawn"
        assert 'class="point"' in section, f"plot {key} has no data drawn"
    width, height, bpp, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 4200)
    step = 7
    samples = [row[x * bpp : x * bpp + 3] for row in rows[::step] for x in range(0, width, step)]
    not_white = sum(1 for px in samples if min(px) < 235)
    blue = sum(1 for px in samples if px[2] > 150 and px[0] < 110)  # the trials' markers and bars (#3366cc)
    assert not_white > 0.03 * len(samples), "the screenshot is blank"
    assert blue > 100, "no plot colours in the screenshot"
