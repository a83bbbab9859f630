"""Session recordings in the asciinema v2 format (``.cast``): a JSON header line, then
``[seconds, "o", text]`` output events and ``[seconds, "r", "COLSxROWS"]`` resizes.

The file format only (ground floor): the mechanism writes recordings with
:class:`CastRecorder`, the tools layer reads them with :func:`read_cast`.
Sizes in a file are checked against the terminal bounds, so a crafted file
cannot ask for a 100000000-column screen.
"""
from __future__ import annotations

import codecs
import errno
import json
import os
import queue
import stat
import threading
import time

from .errors import InvalidArgumentError, absolute_path, out_of_tasks_error, shown
from .vocabulary import COLS_RANGE, MAX_CONFINED_RECORDING_BYTES, MAX_REPLAY_BYTES, ROWS_RANGE


#: Lines waiting for the writer thread; beyond this, events are dropped (and counted), never waited for.
MAX_PENDING_LINES = 10_000


class CastRecorder:
    """Writes one session's raw output, with timings, to an asciinema v2 file.

    Create it with :func:`open_recording` (which opens the file).  The
    session's loop only formats and queues lines; a writer thread of the
    recorder does every write, so a slow disk or a FIFO whose reader never
    reads cannot stall the loop - a full queue drops events (``dropped``).
    With ``max_bytes``, the file stops growing there: later events are dropped and ``truncated`` is set.
    """

    def __init__(self, fd: int, path: str, rows: int, cols: int, title: str = "",
                 max_bytes: int | None = None) -> None:
        self.path = path
        self.events = 0
        self.dropped = 0
        self.truncated = False
        self._room = max_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = time.monotonic()
        self._lines: queue.Queue[str | None] = queue.Queue(MAX_PENDING_LINES)
        self._closed = False
        header = {"version": 2, "width": cols, "height": rows, "timestamp": int(time.time()),
                  "env": {"TERM": "xterm-256color", "SHELL": os.environ.get("SHELL", "/bin/bash")}}
        if title:
            header["title"] = title
        first = json.dumps(header) + "\n"
        self._lines.put(first)
        if self._room is not None:
            self._room -= len(first.encode())
        self._writer = threading.Thread(target=self._write_lines, args=(fd,), name="dsh-terminal-recorder",
                                        daemon=True)
        try:
            self._writer.start()
        except RuntimeError:  # (the user's process limit: the file is closed, the recording not started)
            os.close(fd)
            raise out_of_tasks_error(f"record to {path}") from None

    def _write_lines(self, fd: int) -> None:
        try:
            while True:
                line = self._lines.get()
                if line is None:
                    return
                data = line.encode("utf-8", "surrogateescape")
                try:
                    while data:
                        data = data[os.write(fd, data):]
                except OSError:  # a reader that went away, a full disk: the event is lost, the session is not
                    self.dropped += 1
        finally:
            os.close(fd)

    def _event(self, kind: str, data: str) -> None:
        if self._closed:
            return
        elapsed = round(time.monotonic() - self._started, 6)
        line = json.dumps([elapsed, kind, data], ensure_ascii=False) + "\n"
        if self._room is not None:
            fitted = self._fit(line, elapsed, kind, data)
            if fitted is None:
                self.dropped += 1
                return
            line = fitted
        try:
            self._lines.put_nowait(line)
            self.events += 1
        except queue.Full:
            self.dropped += 1

    def _fit(self, line: str, elapsed: float, kind: str, data: str) -> str | None:
        """``line``, or the part of its output that fits the room left (then the recording is cut); None
        when nothing of it fits."""
        assert self._room is not None
        size = len(line.encode("utf-8", "surrogateescape"))
        if size > self._room:
            self.truncated = True
            keep = self._room - (size - len(data))  # (characters of output that may fit: escapes aside)
            for _ in range(4):  # (JSON escapes may make the cut line too long still: cut more)
                if kind != "o" or keep <= 0:
                    return None
                line = json.dumps([elapsed, kind, data[:keep]], ensure_ascii=False) + "\n"
                size = len(line.encode("utf-8", "surrogateescape"))
                if size <= self._room:
                    break
                keep -= size - self._room
            else:
                return None
        self._room -= size
        return line

    def output(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if text:
            self._event("o", text)

    def resize(self, rows: int, cols: int) -> None:
        self._event("r", f"{cols}x{rows}")

    def close(self) -> None:
        """Finish the file (the writer thread writes what is queued, then closes it); never blocks."""
        if self._closed:
            return
        rest = self._decoder.decode(b"", final=True)
        if rest:
            self._event("o", rest)
        self._closed = True
        try:
            self._lines.put_nowait(None)
        except queue.Full:  # the writer is stuck (a FIFO nobody reads): abandon the rest
            pass

    def wait_written(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds, off the loop) until the file is complete; False if it is not."""
        self._writer.join(timeout)
        return not self._writer.is_alive()


def open_recording(path: str, rows: int, cols: int, title: str = "", confine_to: str | None = None) -> CastRecorder:
    """Open ``path`` for a new recording (blocking file I/O: call it off the session loop).

    With ``confine_to`` (recordings a model asks for) the path must be relative,
    without ``..``, inside that directory with no symlink on the way, and a
    new regular file: an existing file, a FIFO or a device is refused; the file
    stops growing at :data:`~.vocabulary.MAX_CONFINED_RECORDING_BYTES`.
    Without it (the notebook user) any path in an existing directory goes; a
    FIFO without a reader is refused instead of waiting for one.
    """
    if confine_to is not None:
        fd, where = _open_confined(path, confine_to)
        return CastRecorder(fd, where, rows, cols, title, max_bytes=MAX_CONFINED_RECORDING_BYTES)
    where = absolute_path(path)
    if not os.path.isdir(os.path.dirname(where)):
        raise InvalidArgumentError(f"cannot record to {where!r}: its directory does not exist; "
                                   "pick a path in an existing directory")
    try:
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot record to {where!r}: {_why_not(exc, 'record to')}") from None
    os.set_blocking(fd, True)
    return CastRecorder(fd, where, rows, cols, title)


def _open_confined(path: str, root: str) -> tuple[int, str]:
    parts = path.replace("\\", "/").split("/")
    if os.path.isabs(path) or not path or ".." in parts or any(p in ("", ".") for p in parts):
        raise InvalidArgumentError(f"recording path {shown(path, 200)} must be a plain relative path inside the "
                                   f"recordings directory {root} (no leading '/', no '..'), e.g. 'demo.cast'")
    directory = _open_recordings_directory(root)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            except OSError as exc:
                raise InvalidArgumentError(f"cannot record to {shown(path, 200)}: {shown(part, 200)} is not a "
                                           f"directory inside {root} ({exc.strerror}); symlinks are not followed"
                                           ) from None
            os.close(directory)
            directory = inner
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=directory)
        except FileExistsError:
            raise InvalidArgumentError(f"cannot record to {shown(path, 200)}: something already exists there "
                                       "(recordings are new files only); pick a new name") from None
        except OSError as exc:
            raise InvalidArgumentError(f"cannot record to {shown(path, 200)}: {_why_not(exc, 'record to')}"
                                       ) from None
        return fd, os.path.join(root, *parts)
    finally:
        os.close(directory)


def _open_recordings_directory(root: str) -> int:
    """The recordings directory, made if missing, opened as itself: a symlink there (which a session's own
    program can put in the workspace) is not followed - it sent a model's recording anywhere."""
    try:
        os.makedirs(root, exist_ok=True)
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = "it is a symlink, which is not followed" if os.path.islink(root) else exc.strerror
        raise InvalidArgumentError(f"cannot record into the recordings directory {root}: {why}; make it a "
                                   "directory (or set recordDir to one)") from None


#: What an open or a read that failed with these errors means for a recording's path, said plainly.
_REASONS = {
    errno.ENXIO: "it is a FIFO no process is reading (a recording is not made to wait for one)",
    errno.EISDIR: "it is a directory, not a file",
    errno.ENOENT: "no such file or directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space is left on the device",
}


def _why_not(exc: OSError, action: str) -> str:
    """Why an open or read of a recording's path failed, and what to do: the error said plainly, then the
    way out (``action``: ``"record to"`` or ``"replay"``)."""
    reason = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
    if action == "replay":
        return f"{reason}; pass the path of a .cast file (one %term_record made)"
    return f"{reason}; pick a regular file's path in a directory you can write, e.g. 'demo.cast'"


def _unreadable_recording(found: os.stat_result) -> str | None:
    if not stat.S_ISREG(found.st_mode):
        return "it is not a regular file"
    if found.st_size > MAX_REPLAY_BYTES:
        return f"it holds {found.st_size} bytes, more than the {MAX_REPLAY_BYTES} a replay loads"
    return None


def read_cast(path: str) -> tuple[dict, list[tuple[float, str, str]]]:
    """Parse an asciinema v2 file into its header and ``(time, kind, data)`` events (sizes checked).

    Only a regular file of at most :data:`~.vocabulary.MAX_REPLAY_BYTES` is read: opening a FIFO waited for
    a writer, and ``/dev/zero`` was read without end, either holding the kernel for good."""
    try:
        fd = os.open(absolute_path(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read recording {shown(path)}: {_why_not(exc, 'replay')}") from None
    if problem := _unreadable_recording(os.fstat(fd)):
        os.close(fd)
        raise InvalidArgumentError(f"cannot read recording {shown(path)}: {problem}; pass a .cast file's path")
    with open(fd, encoding="utf-8", errors="replace") as f:
        try:
            lines = [line for line in f if line.strip()]
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read recording {shown(path)}: {_why_not(exc, 'replay')}"
                                       ) from None
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
