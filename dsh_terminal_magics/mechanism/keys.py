"""Named keys, encoded as a terminal sends them.

``encode_keys(["Esc", ":", "w", "q", "Enter"], application_cursor=False)``
returns the bytes to write.  A key is a name from :data:`KEY_NAMES`, ``C-a``
… ``C-z`` (control), ``M-x`` (meta: ESC then the key), or any single
character (itself).  Cursor keys follow the program's mode: ``ESC O A`` when
it asked for application cursor keys (``ESC[?1h``), ``ESC [ A`` otherwise.
"""
from __future__ import annotations

from ..errors import InvalidArgumentError

_CURSOR = {"Up": "A", "Down": "B", "Right": "C", "Left": "D", "Home": "H", "End": "F"}
_FIXED = {
    "Enter": "\r", "Tab": "\t", "Esc": "\x1b", "Escape": "\x1b", "Backspace": "\x7f", "Space": " ",
    "Delete": "\x1b[3~", "Insert": "\x1b[2~", "PageUp": "\x1b[5~", "PageDown": "\x1b[6~",
    "F1": "\x1bOP", "F2": "\x1bOQ", "F3": "\x1bOR", "F4": "\x1bOS", "F5": "\x1b[15~", "F6": "\x1b[17~",
    "F7": "\x1b[18~", "F8": "\x1b[19~", "F9": "\x1b[20~", "F10": "\x1b[21~", "F11": "\x1b[23~",
    "F12": "\x1b[24~",
}
#: Every named key (besides C-x, M-x and single characters).
KEY_NAMES = tuple(list(_FIXED) + list(_CURSOR))
MAX_KEYS = 1000


def encode_key(key: str, application_cursor: bool = False) -> str:
    """The characters one key sends."""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"key {key!r} is not a key name: use names like Enter, Esc, Up, C-c, M-x "
                                   "or a single character")
    if key in _CURSOR:
        return ("\x1bO" if application_cursor else "\x1b[") + _CURSOR[key]
    if key in _FIXED:
        return _FIXED[key]
    if len(key) == 3 and key[:2] == "C-" and key[2].isalpha() and key[2].isascii():
        return chr(ord(key[2].lower()) - ord("a") + 1)
    if len(key) >= 3 and key[:2] == "M-":
        return "\x1b" + encode_key(key[2:], application_cursor)
    if len(key) == 1:
        return key
    raise InvalidArgumentError(f"unknown key {key!r}: use one of {', '.join(KEY_NAMES)}, C-a..C-z, M-<key>, "
                               "or a single character")


def encode_keys(keys: list[str], application_cursor: bool = False) -> bytes:
    """The bytes a list of keys sends, in order."""
    if len(keys) > MAX_KEYS:
        raise InvalidArgumentError(f"too many keys ({len(keys)}): send at most {MAX_KEYS} per call")
    return "".join(encode_key(k, application_cursor) for k in keys).encode("utf-8")
