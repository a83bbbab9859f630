"""A program that makes looking at it wait on a FUSE file system it serves itself (run by the tests in a
session, in a user and mount namespace of its own: ``unshare -Urm python3 hostile_fuse.py MODE DIR``).

It mounts :class:`~tests.fuse_mounts.StuckFile` at DIR and forks a child that waits in a way that a look at
it reads ``f`` (while the server, this process, leaves those requests unanswered):

- ``mem``: the child sleeps 60 s with the ``timespec`` it passed in a page of ``f`` it mapped; then its
  cached pages are dropped and a read of ``f`` is not answered: a look at the sleep's timeout reads that page.
- ``tty``: the child reads the terminal into a page of ``f`` it mapped, and a read of ``f`` is not answered:
  once input comes, the terminal's read holds the terminal's locks while it waits to copy it there.
- ``epoll``: one thread of the child waits in ``epoll_wait``, another adds ``f`` to that epoll, whose poll
  (``POLL``) is not answered: the adding thread holds the epoll's lock, which reading its ``fdinfo`` waits for.

Prints ``ready`` once the child waits so; the child ends with the server (SIGKILL ends the connection).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import select
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.fuse_mounts import POLL, READ, StuckFile  # noqa: E402


def main(mode: str, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    timespec = struct.pack("qq", 60, 0)
    unanswered = {"mem": set(), "tty": {READ}, "epoll": {POLL}}[mode]
    server = StuckFile(directory, unanswered=unanswered, content=timespec)
    path = os.path.join(directory, "f")
    ready_read, ready_write = os.pipe()
    if os.fork() == 0:
        os.close(ready_read)
        os.close(server.fd)  # (held here too, the connection would outlive the server: nothing could end it)
        CHILDREN[mode](path, ready_write)
        os._exit(0)
    os.close(ready_write)
    os.read(ready_read, 1)
    if mode == "mem":
        time.sleep(0.3)  # (the child is in its sleep by then)
        server.unanswered.add(READ)
        os.close(os.open(path, os.O_RDONLY))  # (an open drops the cached pages, and the child's mapping of them)
    print("ready", flush=True)
    while True:
        time.sleep(1000)


def sleep_on_it(path: str, ready: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    mapping = mmap.mmap(fd, 16, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    assert mapping[:16] == struct.pack("qq", 60, 0)
    os.write(ready, b"x")
    ctypes.CDLL(None).nanosleep(ctypes.c_void_p(address), None)


def read_the_terminal_into_it(path: str, ready: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    mapping = mmap.mmap(fd, 16, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    os.write(ready, b"x")
    ctypes.CDLL(None).read(0, ctypes.c_void_p(address), 4096)


def poll_it(path: str, ready: int) -> None:
    epoll = select.epoll()
    waiter = threading.Thread(target=epoll.poll)
    waiter.start()
    time.sleep(0.2)
    os.write(ready, b"x")
    fd = os.open(path, os.O_RDONLY)
    epoll.register(fd, select.EPOLLIN)


CHILDREN = {"mem": sleep_on_it, "tty": read_the_terminal_into_it, "epoll": poll_it}

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
