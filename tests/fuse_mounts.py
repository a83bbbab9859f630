"""Real FUSE file systems that stop answering, as a dead sshfs does: for what a hung mount must not hold.

Mounted with the kernel's FUSE protocol straight on ``/dev/fuse`` (root only, no libfuse): :class:`HungMount`
answers nothing at all, so everything that looks at the mount point waits; :class:`StuckFile` serves one
file, ``f``, and never answers a read of it, so a reader waits in the kernel - after a SIGKILL too, in
uninterruptible sleep.  :meth:`abort` ends the connection and every wait with it.
"""
from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading

import pytest

_IN_HEADER = struct.Struct("<IIQQIIIHH")
_OUT_HEADER = struct.Struct("<IiQ")
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
_INIT, _LOOKUP, _GETATTR, _OPEN, _OPENDIR, _RELEASE, _RELEASEDIR = 26, 1, 3, 14, 27, 18, 29
READ, FLUSH, POLL = 15, 25, 40
#: FORGET, INTERRUPT, BATCH_FORGET: no answer is expected.
_NO_ANSWER = {2, 36, 42}
MNT_DETACH = 2


class HungMount:
    """A FUSE mount at ``path`` whose server never answers (not even the kernel's first request)."""

    def __init__(self, path: str) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.path = path
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        options = f"fd={self.fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}"
        if self._libc.mount(b"hung", path.encode(), b"fuse", 0, options.encode()) != 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), "mount")
        self._aborted = False

    def abort(self) -> None:
        """End the connection: every wait on the mount fails (once; again does nothing)."""
        if not self._aborted:
            self._aborted = True
            self._libc.umount2(self.path.encode(), MNT_DETACH)
            os.close(self.fd)


class StuckFile(HungMount):
    """A FUSE mount at ``path`` holding one file, ``f``, whose reads are never answered.

    ``unanswered``: the requests left unanswered (by opcode; may be changed while it serves); ``content``: what
    a read of ``f`` gets when it is answered."""

    def __init__(self, path: str, unanswered: set[int] | None = None, content: bytes = b"") -> None:
        super().__init__(path)
        self.unanswered = {READ, FLUSH} if unanswered is None else unanswered
        self.content = content
        self._stopping = False
        self._server = threading.Thread(target=self._serve, daemon=True)
        self._server.start()

    def abort(self) -> None:
        self._stopping = True  # (a thread blocked reading the device would keep the connection alive)
        self._server.join()
        super().abort()

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self._stopping:
            if not poller.poll(50):
                continue
            try:
                request = os.read(self.fd, 1 << 20)
            except OSError:
                return
            length, opcode, unique, node = _IN_HEADER.unpack_from(request)[:4]
            if opcode not in _NO_ANSWER and opcode not in self.unanswered:
                error, body = self._answer(opcode, node, request[_IN_HEADER.size:length])
                os.write(self.fd, _OUT_HEADER.pack(_OUT_HEADER.size + len(body), -error, unique) + body)

    def _answer(self, opcode: int, node: int, body: bytes) -> tuple[int, bytes]:
        if opcode == _INIT:
            minor = struct.unpack_from("<II", body)[1]
            return 0, struct.pack("<IIIIHHIIHHII", 7, min(minor, 31), 0, 0, 16, 12, 4096, 1, 1, 0, 0, 0) + bytes(24)
        if opcode == _LOOKUP:
            if node == 1 and body.split(b"\0")[0] == b"f":
                return 0, struct.pack("<QQQQII", 2, 0, 1, 1, 0, 0) + _attr(2)
            return errno.ENOENT, b""
        if opcode == _GETATTR:
            return 0, struct.pack("<QII", 1, 0, 0) + _attr(node)
        if opcode in (_OPEN, _OPENDIR):
            return 0, struct.pack("<QII", 1, 0, 0)  # (no FOPEN_KEEP_CACHE: an open drops f's cached pages)
        if opcode == READ:
            offset, size = struct.unpack_from("<QQI", body)[1:3]
            return 0, self.content[offset:offset + size]
        if opcode in (_RELEASE, _RELEASEDIR):
            return 0, b""
        return errno.ENOSYS, b""


def _attr(node: int) -> bytes:
    mode, size = (0o40755, 0) if node == 1 else (0o100644, 100)
    return _ATTR.pack(node, size, 1, 0, 0, 0, 0, 0, 0, mode, 1, os.getuid(), os.getgid(), 0, 4096, 0)


def mounted(kind: type[HungMount], path: str) -> HungMount:
    """``kind`` mounted at ``path`` (made here); the test is skipped where FUSE cannot be mounted."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("mounting a FUSE file system needs root and /dev/fuse")
    os.mkdir(path)
    try:
        return kind(path)
    except OSError as exc:
        pytest.skip(f"FUSE cannot be mounted here: {exc}")
