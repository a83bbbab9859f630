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
from typing import Any, Callable, Coroutine, TypeVar

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

    def run(self, coro: Coroutine[Any, Any, T],
            on_interrupt: Callable[[], Coroutine[Any, Any, Any]] | None = None) -> T:
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
        """Call a plain function on the loop thread and return its result.

        One ``call_soon_threadsafe`` hop, no task: the cheapest way in.
        """
        if self.in_loop_thread():
            return fn(*args)
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                result.set_result(fn(*args))
            except BaseException as exc:
                result.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        return result.result()

    def call_and_wait(self, start: Callable[[], "asyncio.Future[T]"],
                      on_interrupt: Callable[[], Any] | None = None) -> T:
        """Run ``start()`` on the loop (it returns a loop future) and wait here for that future.

        The hot path of a foreground send: one hop in, one hop out, no task
        creation in between.  On KeyboardInterrupt, ``on_interrupt()`` runs on
        the loop and the wait continues (bounded) before the interrupt propagates.
        """
        if self.in_loop_thread():
            raise TerminalError("blocking terminal calls cannot be made from the terminal loop thread; "
                                "use the async API there")
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def copy(done: "asyncio.Future[T]") -> None:
            if done.cancelled():
                result.cancel()
            elif done.exception() is not None:
                result.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                result.set_result(done.result())

        def invoke() -> None:
            try:
                start().add_done_callback(copy)
            except BaseException as exc:
                result.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        try:
            return result.result()
        except KeyboardInterrupt:
            if on_interrupt is not None:
                self.loop.call_soon_threadsafe(on_interrupt)
                try:
                    result.result(timeout=10)
                except Exception:
                    pass
            raise
