"""Screenshots of the browser tests, in the test's tmp dir and copied to `.artifacts/web-ui/`, and
the check that a chart's screenshot is a picture: the PNG decoded (no imaging library needed)
and the chart's colours found in it."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

from tests.conftest import REPO

ARTIFACTS = REPO / ".artifacts" / "web-ui"


class Shots:
    """Full-page screenshots, in the test's tmp dir and copied to `.artifacts/web-ui/`."""

    def __init__(self, tmp: Path, prefix: str = "") -> None:
        self.prefix = prefix  # keeps two tests' files apart in .artifacts/web-ui/
        self.dir = tmp / "screenshots"
        self.dir.mkdir()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.pages: list[str] = []

    def __call__(self, page, name: str) -> Path:  # type: ignore[no-untyped-def]
        path = self.dir / f"{self.prefix}{len(self.pages) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shutil.copy(path, ARTIFACTS / path.name)
        self.pages.append(page.content())
        return path

    def element(self, locator, name: str) -> Path:  # type: ignore[no-untyped-def]
        """A screenshot of one element (a chart)."""
        path = self.dir / f"{self.prefix}{len(self.pages) + 1:02d}-{name}.png"
        locator.screenshot(path=str(path))
        shutil.copy(path, ARTIFACTS / path.name)
        self.pages.append(locator.page.content())
        return path


def png_pixels(path: Path) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the distinct RGB colours of an 8-bit RGB(A) PNG, as Chromium writes
    them (no imaging library needed: inflate the IDAT chunks and undo the row filters)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and not interlace, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * channels
    previous, colours = bytearray(stride), set()
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                guess = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + guess) & 0xFF
        colours.update((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, channels))
        previous = line
    return width, height, colours


def hex_rgb(value: str) -> tuple[int, int, int]:
    return (int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16))


def assert_shows(path: Path, *colours: str, min_width: int = 200) -> None:
    """The screenshot is a picture, not a blank: wide enough, many colours, and the given
    (CSS) colours of the chart's marks among them."""
    width, height, seen = png_pixels(path)
    assert width >= min_width and height >= 20, (path, width, height)
    assert len(seen) > 8, f"{path} looks blank: {len(seen)} colours"
    for colour in colours:
        assert hex_rgb(colour) in seen, f"{path} shows no {colour}"
