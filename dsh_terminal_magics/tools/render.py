"""Capped text rendering: what a model sees, never more than ``maxResultBytes`` UTF-8 bytes.

Pure functions.  A rendered result is one metadata line (``[wait: …]``,
``[session: …]``, ``[lines: a-b of n]``, job status …) and a body.  When the
whole does not fit, the body is cut (keeping its newest part for terminal
views, its start otherwise), the marker ``[output truncated]`` is added, and
metadata is kept in preference to the body; only at caps too small for all
metadata plus the marker are the lowest-priority metadata items dropped.
Cuts never split a UTF-8 character.
"""
from __future__ import annotations

from typing import Sequence

MARKER = "[output truncated]"


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def clean_text(text: str) -> str:
    """Replace lone surrogates so the result is always valid UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def truncate_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` within ``max_bytes`` UTF-8 bytes."""
    if max_bytes <= 0:
        return ""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def truncate_utf8_tail(text: str, max_bytes: int) -> str:
    """The longest suffix of ``text`` within ``max_bytes`` UTF-8 bytes."""
    if max_bytes <= 0:
        return ""
    data = text.encode("utf-8")
    return data[max(0, len(data) - max_bytes):].decode("utf-8", "ignore")


def body_budget(meta: Sequence[str], cap: int) -> int:
    """Bytes left for the body when all of ``meta`` and the marker are shown."""
    return cap - utf8_size(" ".join(meta)) - 2 - utf8_size(MARKER)


def render_capped(meta: Sequence[str], body: str, cap: int, *, keep_tail: bool = False,
                  cut: bool = False) -> str:
    """Render ``meta`` (priority order) and ``body`` in at most ``cap`` bytes.

    ``cut`` says the body is already incomplete (the marker must show).
    """
    meta = [clean_text(m) for m in meta]
    body = clean_text(body)
    header = " ".join(meta)
    whole = header + ("\n" + body if body else "")
    if not cut and utf8_size(whole) <= cap:
        return whole
    for keep in range(len(meta), 0, -1):
        header = " ".join(meta[:keep])
        fixed = utf8_size(header) + 1 + utf8_size(MARKER)
        if fixed <= cap:
            break
    else:
        return truncate_utf8(header, cap)
    room = cap - fixed - 1
    if keep_tail:
        piece = truncate_utf8_tail(body, room)
        return f"{header}\n{MARKER}" + (f"\n{piece}" if piece else "")
    piece = truncate_utf8(body, room)
    return f"{header}\n" + (f"{piece}\n" if piece else "") + MARKER
