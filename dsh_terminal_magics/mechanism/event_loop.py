"""The private event loop that owns all session state.

One asyncio loop runs on a daemon thread for the whole process (the pattern
of IPython's ``%%script --bg``).  Other threads enter it only through
:meth:`EventLoopThread.run` / :meth:`EventLoopThread.arun`, which use
``run_coroutine_threadsafe``.  It keeps sessions alive between cells, also
in terminal IPython where no loop runs between prompts.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from ..errors import TerminalError

T = TypeVar("T")


class EventLoopThread:
    """An asyncio loop on a daemon thread; :meth:`shared` gives the process-wide one."""

    _shared: "EventLoopThread | None" = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "dsh-terminal-loop") -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), name=name, daemon=True)
        self.thread.start()
        started.wait()

    @classmethod
    def shared(cls) -> "EventLoopThread":
        """The process-wide loop thread, started on first use."""
        with cls._shared_lock:
            if cls._shared is None or not cls._shared.thread.is_alive():
                cls._shared = cls()
            return cls._shared

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        if self.in_loop_thread():
            coro.close()
            raise TerminalError("blocking terminal calls cannot be made from the terminal loop thread; "
                                "use the async API there")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], on_interrupt: Callable[[], Awaitable[Any]] | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result in this thread.

        On KeyboardInterrupt, ``on_interrupt`` (a coroutine function) runs on the
        loop first, then the interrupt propagates.
        """
        future = self.submit(coro)
        try:
            return future.result()
        except KeyboardInterrupt:
            if on_interrupt is not None:
                try:
                    asyncio.run_coroutine_threadsafe(on_interrupt(), self.loop).result(timeout=10)
                except Exception:
                    pass
            raise

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` (run on the private loop) from any other event loop."""
        if self.in_loop_thread():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a plain function on the loop thread and return its result."""
        if self.in_loop_thread():
            return fn(*args)

        async def invoke() -> T:
            return fn(*args)

        return self.submit(invoke()).result()
