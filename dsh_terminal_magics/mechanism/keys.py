"""Named keys, encoded as a terminal (xterm) sends them.

``encode_keys(["Esc", ":", "w", "q", "Enter"], application_cursor=False)``
returns the bytes to write.  A key is a name from :data:`KEY_NAMES` or any
single character, after modifiers: ``C-`` (control), ``S-`` (shift), ``M-``
(meta), in any order - ``C-a``, ``C-Space``, ``C-_``, ``S-Tab``, ``C-Left``,
``M-x``, ``C-M-a``, ``S-F5``.  Cursor keys follow the program's mode: ``ESC O A``
when it asked for application cursor keys (``ESC[?1h``), ``ESC [ A``
otherwise; modified ones are xterm's ``ESC [ 1 ; m A``.  tmux's names
(``BSpace``, ``BTab``, ``PPage``, ``NPage``, ``PgUp``, ``PgDn``, ``IC``, ``DC``),
modifiers as people write them (``ctrl+c``, ``Alt-x``, ``shift+tab``) and caret
notation (``^C``) are accepted too.
"""
from __future__ import annotations

import re

from ..errors import InvalidArgumentError, shown

_CURSOR = {"Up": "A", "Down": "B", "Right": "C", "Left": "D", "Home": "H", "End": "F"}
#: Keys xterm sends as ``ESC [ n ~`` (with modifiers ``ESC [ n ; m ~``).
_TILDE = {"Insert": 2, "Delete": 3, "PageUp": 5, "PageDown": 6, "F5": 15, "F6": 17, "F7": 18, "F8": 19,
          "F9": 20, "F10": 21, "F11": 23, "F12": 24}
#: F1-F4: ``ESC O P``..``S`` (with modifiers ``ESC [ 1 ; m P``..``S``).
_PF = {"F1": "P", "F2": "Q", "F3": "R", "F4": "S"}
_PLAIN = {"Enter": "\r", "Tab": "\t", "Esc": "\x1b", "Escape": "\x1b", "Backspace": "\x7f", "Space": " "}
_ALIASES = {"BSpace": "Backspace", "BTab": "S-Tab", "PPage": "PageUp", "NPage": "PageDown", "PgUp": "PageUp",
            "PgDn": "PageDown", "IC": "Insert", "DC": "Delete", "Return": "Enter"}
#: Every named key (besides single characters), modifiers aside.
KEY_NAMES = tuple([*_PLAIN, *_CURSOR, *_TILDE, *_PF])
_BY_LOWER_CASE = {name.lower(): name for name in [*KEY_NAMES, *_ALIASES]}
#: A modifier before a key: C-, S-, M- (or c-, ctrl+, Control-, alt+, meta-, shift+ ... as people write them).
_MODIFIER_NAMES = {"c": "C", "ctrl": "C", "control": "C", "m": "M", "meta": "M", "alt": "M", "s": "S", "shift": "S"}
_MODIFIER_PREFIX = re.compile(r"(ctrl|control|meta|alt|shift|[cms])[-+](?=.)", re.IGNORECASE)
#: xterm's modifier bits (the parameter sent is one more than their sum).
_MODIFIER_BITS = {"S": 1, "M": 2, "C": 4}
#: What control turns these characters into (besides letters): C-Space and C-@ are NUL, C-? is DEL.
_CONTROL_PUNCTUATION = {" ": "\x00", "@": "\x00", "[": "\x1b", "\\": "\x1c", "]": "\x1d", "^": "\x1e", "_": "\x1f",
                        "?": "\x7f"}
MAX_KEYS = 1000
_USE = ("use a name (Enter, Tab, Esc, Backspace, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, "
        "Insert, Delete, F1-F12) or a single character, after modifiers C- (control), S- (shift), M- (meta): "
        "e.g. C-c, C-Space, S-Tab, C-Left, M-x")


def encode_key(key: str, application_cursor: bool = False) -> str:
    """The characters one key sends."""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"key {shown(key)} is not a key name: {_USE}")
    base, modifiers = _parse(key)
    meta = "M" in modifiers
    bits = sum(_MODIFIER_BITS[m] for m in modifiers)
    if base in _CURSOR:
        if not bits:
            return ("\x1bO" if application_cursor else "\x1b[") + _CURSOR[base]
        return f"\x1b[1;{bits + 1}{_CURSOR[base]}"
    if base in _TILDE:
        return f"\x1b[{_TILDE[base]}~" if not bits else f"\x1b[{_TILDE[base]};{bits + 1}~"
    if base in _PF:
        return f"\x1bO{_PF[base]}" if not bits else f"\x1b[1;{bits + 1}{_PF[base]}"
    sent = _plain_key(key, base, modifiers - {"M"})
    return "\x1b" + sent if meta else sent


def _parse(key: str) -> tuple[str, set[str]]:
    """``(base key, modifiers)``: ``"C-S-Left"`` is ``("Left", {"C", "S"})``, and so are ``"ctrl+shift+left"``
    and ``"Control-Shift-Left"``; ``"^C"`` is ``("C", {"C"})``; a tmux name is its own key."""
    modifiers: set[str] = set()
    rest = key
    if len(key) == 2 and key[0] == "^":  # caret notation, as terminals print control characters
        return key[1], {"C"}
    while (prefix := _MODIFIER_PREFIX.match(rest)) is not None:
        modifier = _MODIFIER_NAMES[prefix.group(1).lower()]
        if modifier in modifiers:
            raise InvalidArgumentError(f"key {shown(key)} repeats the modifier {modifier}-: {_USE}")
        modifiers.add(modifier)
        rest = rest[prefix.end():]
    if len(rest) > 1:
        rest = _BY_LOWER_CASE.get(rest.lower(), rest)  # (names in any case: enter, ESC, pageup)
    alias = _ALIASES.get(rest)
    if alias is not None:
        return _parse_alias(key, alias, modifiers)
    if rest not in _PLAIN and rest not in _CURSOR and rest not in _TILDE and rest not in _PF and len(rest) != 1:
        raise InvalidArgumentError(f"unknown key {shown(key)}: {_USE}")
    return rest, modifiers


def _parse_alias(key: str, alias: str, modifiers: set[str]) -> tuple[str, set[str]]:
    base, own = _parse(alias)
    if modifiers & own:
        raise InvalidArgumentError(f"key {shown(key)} repeats the modifier {''.join(modifiers & own)}-: {_USE}")
    return base, modifiers | own


def _plain_key(key: str, base: str, modifiers: set[str]) -> str:
    """A key sent as characters (meta aside): Enter, Tab, Esc, Backspace, Space or a single character, with
    control or shift where the terminal has a character for it."""
    if base == "Tab" and modifiers == {"S"}:
        return "\x1b[Z"  # back-tab
    char = " " if base == "Space" else base if len(base) == 1 else None
    if char is None:
        if modifiers:
            raise InvalidArgumentError(f"key {shown(key)}: a terminal sends {base} with "
                                       f"{'-, '.join(sorted(modifiers))}- as {base} alone (S-Tab is back-tab): "
                                       f"send {base}, or M-{base}")
        return _PLAIN[base]
    if "S" in modifiers:
        if not char.isalpha():
            raise InvalidArgumentError(f"key {shown(key)}: shift makes only letters upper-case; send the shifted "
                                       "character itself (e.g. '!' for S-1)")
        char = char.upper()
    if "C" in modifiers:
        if char.isascii() and char.isalpha():
            return chr(ord(char.lower()) - ord("a") + 1)
        if char not in _CONTROL_PUNCTUATION:
            raise InvalidArgumentError(f"key {shown(key)}: a terminal has no control character for {char!r}: send C- "
                                       "with a letter, Space, @, [, \\, ], ^, _ or ?")
        return _CONTROL_PUNCTUATION[char]
    return char


def encode_keys(keys: list[str], application_cursor: bool = False) -> bytes:
    """The bytes a list of keys sends, in order."""
    if len(keys) > MAX_KEYS:
        raise InvalidArgumentError(f"too many keys ({len(keys)}): send at most {MAX_KEYS} per call")
    return "".join(encode_key(k, application_cursor) for k in keys).encode("utf-8")


#: A whole key code a terminal sends: a CSI sequence (``ESC [ 1 ; 5 A``) or an SS3 one (``ESC O P``).
_WHOLE_KEY_CODE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|O[ -~])")


def holds_an_escape_key(typed: bytes) -> bool:
    """Whether ``typed`` holds an ESC that is not the start of a whole key code: the Esc key (alone, or before
    other keys: ``Esc : w q Enter``), or Meta as ESC before a key (``M-x``).  A program may wait out a timeout
    before it acts on one (vim's Esc timeout); a cursor or function key (``Down``, ``F2``) it takes at once."""
    return b"\x1b" in typed and b"\x1b" in _WHOLE_KEY_CODE.sub(b"", typed)
