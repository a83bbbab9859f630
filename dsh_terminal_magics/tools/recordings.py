"""Playing recordings back: an asciinema v2 file applied, event by event, to a screen model."""
from __future__ import annotations

from ..asciicast import check_size, read_cast
from ..mechanism.screen import ScreenModel


class CastPlayer:
    """A recording (checked when loaded) and the screen its events build up.

    ``events`` are ``(seconds, kind, data)``; :meth:`apply` plays one;
    ``screen`` is the pyte screen (read it from the thread that applies).
    """

    def __init__(self, path: str) -> None:
        header, self.events = read_cast(path)
        self.path = path
        self.rows, self.cols = check_size(path, header.get("height", 24), header.get("width", 80))
        self._model = ScreenModel(self.rows, self.cols, 0)

    @property
    def screen(self):  # type: ignore[no-untyped-def]
        return self._model.screen

    def apply(self, kind: str, data: str) -> None:
        if kind == "o":
            self._model.feed_text(data)
        elif kind == "r":
            cols, _, rows = data.partition("x")
            self._model.resize(*check_size(self.path, rows, cols))

    def play_all(self) -> str:
        """Apply every event at once; the final screen as text."""
        for _stamp, kind, data in self.events:
            self.apply(kind, data)
        return self.text()

    def text(self) -> str:
        return self._model.snapshot().text()
