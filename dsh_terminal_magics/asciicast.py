"""Session recordings in the asciinema v2 format (``.cast``): a JSON header line, then
``[seconds, "o", text]`` output events and ``[seconds, "r", "COLSxROWS"]`` resizes.

The file format only (ground floor): the mechanism writes recordings with
:class:`CastRecorder`, the tools layer reads them with :func:`read_cast`.
Sizes in a file are checked against the terminal bounds, so a crafted file
cannot ask for a 100000000-column screen.
"""
from __future__ import annotations

import codecs
import json
import os
import time
from typing import IO

from .errors import InvalidArgumentError
from .vocabulary import COLS_RANGE, ROWS_RANGE


class CastRecorder:
    """Writes one session's raw output, with timings, to an asciinema v2 file."""

    def __init__(self, path: str, rows: int, cols: int, title: str = "") -> None:
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isdir(os.path.dirname(path)):
            raise InvalidArgumentError(f"cannot record to {path!r}: its directory does not exist; "
                                       "pick a path in an existing directory")
        self.path = path
        self._file: IO[str] = open(path, "w", encoding="utf-8")
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = time.monotonic()
        self.events = 0
        header = {"version": 2, "width": cols, "height": rows, "timestamp": int(time.time()),
                  "env": {"TERM": "xterm-256color", "SHELL": os.environ.get("SHELL", "/bin/bash")}}
        if title:
            header["title"] = title
        self._file.write(json.dumps(header) + "\n")

    def _event(self, kind: str, data: str) -> None:
        elapsed = round(time.monotonic() - self._started, 6)
        self._file.write(json.dumps([elapsed, kind, data], ensure_ascii=False) + "\n")
        self.events += 1

    def output(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if text:
            self._event("o", text)

    def resize(self, rows: int, cols: int) -> None:
        self._event("r", f"{cols}x{rows}")

    def close(self) -> None:
        if self._file.closed:
            return
        rest = self._decoder.decode(b"", final=True)
        if rest:
            self._event("o", rest)
        self._file.close()


def read_cast(path: str) -> tuple[dict, list[tuple[float, str, str]]]:
    """Parse an asciinema v2 file into its header and ``(time, kind, data)`` events (sizes checked)."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read recording {path!r}: {exc.strerror}") from None
    try:
        header = json.loads(lines[0])
        events = [(float(t), str(k), str(d)) for t, k, d in (json.loads(line) for line in lines[1:])]
    except (ValueError, IndexError, TypeError) as exc:
        raise InvalidArgumentError(f"{path!r} is not an asciinema v2 recording: {exc}") from None
    if not isinstance(header, dict) or header.get("version") != 2:
        raise InvalidArgumentError(f"{path!r} is not an asciinema v2 recording (no version 2 header)")
    check_size(path, header.get("height", 24), header.get("width", 80))
    for _, kind, data in events:
        if kind == "r":
            cols, _, rows = data.partition("x")
            check_size(path, rows, cols)
    return header, events


def check_size(path: str, rows: object, cols: object) -> tuple[int, int]:
    """``(rows, cols)`` as ints within the terminal bounds, or an error naming the file."""
    try:
        r, c = int(rows), int(cols)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        r = c = -1
    if not (ROWS_RANGE[0] <= r <= ROWS_RANGE[1] and COLS_RANGE[0] <= c <= COLS_RANGE[1]):
        raise InvalidArgumentError(f"{path!r} asks for a {cols}x{rows} terminal: sizes must be {COLS_RANGE[0]}-"
                                   f"{COLS_RANGE[1]} columns by {ROWS_RANGE[0]}-{ROWS_RANGE[1]} rows")
    return r, c
