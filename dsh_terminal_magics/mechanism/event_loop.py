"""The private event loop that owns all session state.

One asyncio loop runs on a daemon thread for the whole process (the pattern
of IPython's ``%%script --bg``).  Other threads enter it only through
:meth:`EventLoopThread.run` / :meth:`EventLoopThread.arun`, which use
``run_coroutine_threadsafe``.  It keeps sessions alive between cells, also
in terminal IPython where no loop runs between prompts.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
import time
from typing import Any, Callable, Coroutine, Generic, Protocol, TypeVar

from ..errors import TerminalError, out_of_tasks_error

T = TypeVar("T")

#: Longest a blocking call in the main thread waits before the interpreter looks for a signal that arrived
#: without waking it (:meth:`Handoff._wait_interruptibly`): the worst delay of such a Ctrl-C.
SIGNAL_LOOK = 0.05


async def wait_within(awaitable: "asyncio.Future[T] | Coroutine[Any, Any, T]", timeout: float) -> T:
    """``asyncio.wait_for`` that never drops a cancellation: on Python 3.11 a cancel that came in the loop turn
    that also finished ``awaitable`` was dropped and its result returned - a Ctrl-C right after an open was
    handed in let the open go on to make a session nobody was told of (a spawn slower by 10 ms made it likely).
    Past ``timeout`` ``awaitable`` is cancelled and :class:`asyncio.TimeoutError` raised; cancelled, it is
    cancelled too (shield what must run on)."""
    future = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({future}, timeout=timeout)
    except asyncio.CancelledError:
        future.cancel()
        raise
    if not done:
        future.cancel()
        raise asyncio.TimeoutError
    return future.result()

class Completion(Protocol[T]):
    """What :meth:`EventLoopThread.call_and_wait` waits for: a loop future, or an object that calls back with
    one (a send calls back in the turn it finishes)."""

    def add_done_callback(self, callback: Callable[["asyncio.Future[T]"], object]) -> None: ...


class LoopProxy:
    """``proxy.name(...)`` runs the coroutine method ``obj.name(...)`` on the loop thread.

    ``blocking=True``: from any other thread, waiting for the result (the
    pattern of IPython's ``_AsyncIOProxy``, turned around); ``blocking=False``:
    awaitable from any other event loop.  One proxy replaces a hand-written
    blocking and async twin per operation.
    """

    def __init__(self, obj: object, loop_thread: "EventLoopThread", blocking: bool) -> None:
        self._obj = obj
        self._loop_thread = loop_thread
        self._blocking = blocking

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._obj, name)
        if not asyncio.iscoroutinefunction(method):
            raise AttributeError(f"{type(self._obj).__name__}.{name} is not a coroutine method")
        loop_thread = self._loop_thread
        if self._blocking:
            def call(*args: Any, **kwargs: Any) -> Any:
                return loop_thread.run(method(*args, **kwargs))
        else:
            async def call(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                return await loop_thread.arun(method(*args, **kwargs))
        call.__name__ = name
        call.__doc__ = method.__doc__
        return call


class Handoff(Generic[T]):
    """A result handed from the loop thread to the one thread waiting for it: a lock the loop releases once
    the value is in.  A ``concurrent.futures.Future`` does the same with a condition variable, callbacks and
    state checks - more code on both sides of the hot path of every send."""

    __slots__ = ("_lock", "_value", "_error", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._value: Any = None
        self._error: BaseException | None = None
        self._set = False

    def set_result(self, value: T) -> None:
        if not self._set:
            self._value = value
            self._set = True  # (after the value: a waiter that sees it set may take the value)
            self._lock.release()

    def set_exception(self, error: BaseException) -> None:
        if not self._set:
            self._error = error
            self._set = True
            self._lock.release()

    def result(self, timeout: float | None = None) -> T:
        """Wait for the value (raises the error; ``TimeoutError`` after ``timeout`` seconds).  Once it is in,
        every call returns at once - even after a Ctrl-C that struck between taking the lock and giving it
        back (the next wait for the same result then blocked for good)."""
        if not self._set:
            if threading.get_ident() == threading.main_thread().ident:  # (where signal handlers run)
                self._wait_interruptibly(timeout)
            elif not self._lock.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError("no result in time")
            else:
                self._lock.release()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return]

    def _wait_interruptibly(self, timeout: float | None) -> None:
        """The main thread's wait: in slices of :data:`SIGNAL_LOOK` seconds, between which the interpreter
        runs the signal handlers due.  A lock wait wakes for a SIGINT only when the kernel delivers it to this
        thread, during the wait: Linux may hand a process's signal to any of its threads that does not block
        it, and one that lands just before the wait begins is handled by then - either way the Ctrl-C was
        lost until the call ended of itself (the program ran on to the send's timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SIGNAL_LOOK if deadline is None else min(SIGNAL_LOOK, deadline - time.monotonic())
            if self._lock.acquire(timeout=max(left, 0.0)):
                self._lock.release()
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("no result in time")


class EventLoopThread:
    """An asyncio loop on a daemon thread; :meth:`shared` gives the process-wide one."""

    _shared: "EventLoopThread | None" = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "dsh-terminal-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._pid = os.getpid()
        #: Calls handed in by other threads (see :meth:`_hand_in`); the loop runs them in order.
        self._inbox: collections.deque[Callable[[], None]] = collections.deque()
        self._inbox_armed = False
        #: Wakes the loop for the inbox: one eventfd write, read by the loop's selector (asyncio's own
        #: wake-up is a socket write plus a handle and a drain of the socket on every wake).
        self._doorbell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), name=name, daemon=True)
        try:
            self.thread.start()
        except RuntimeError:  # (the user's process limit)
            os.close(self._doorbell)
            self.loop.close()
            raise out_of_tasks_error("start the terminal loop") from None
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
        self.loop.add_reader(self._doorbell, self._empty_inbox)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def _hand_in(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the loop soon (from any thread).

        Only the first call since the loop last emptied the inbox rings the doorbell (an eventfd), so while
        the loop is busy (many agents sending at once) handing in costs an append.  The GIL orders the flag
        and the deque: a call appended after the loop cleared the flag finds it clear and rings itself.
        """
        self._check_alive()
        self._inbox.append(fn)
        if not self._inbox_armed:
            self._inbox_armed = True
            os.eventfd_write(self._doorbell, 1)

    def _empty_inbox(self) -> None:
        try:
            os.eventfd_read(self._doorbell)
        except BlockingIOError:
            pass
        self._inbox_armed = False
        inbox = self._inbox
        while inbox:
            try:
                inbox.popleft()()
            except Exception as exc:  # each call hands its own errors to its caller: this is a bug
                self.loop.call_exception_handler({"message": "a call handed to the terminal loop failed",
                                                  "exception": exc})

    def _check_alive(self) -> None:
        if self.thread.is_alive():
            return
        if os.getpid() != self._pid:  # (a fork's copy of the thread object: the thread itself stayed behind)
            raise TerminalError("this process is a fork of the one whose terminal loop runs these sessions "
                                "(os.fork, or multiprocessing's 'fork' start method): they are that process's; "
                                "use them there, or open sessions with a TerminalTools made in this process")
        raise TerminalError("the terminal loop thread has stopped (the interpreter is shutting down); "
                            "nothing more can run on it")

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        self._check_may_wait(coro)
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _check_may_wait(self, coro: Coroutine[Any, Any, Any] | None = None) -> None:
        """Raise unless this thread may hand the loop a call and wait for it: not the loop thread itself, and
        the loop thread still runs.  ``coro`` is closed first (it never starts: no "never awaited" warning)."""
        if self.in_loop_thread():
            if coro is not None:
                coro.close()
            raise TerminalError("blocking terminal calls cannot be made from the terminal loop thread; "
                                "use the async API there")
        if not self.thread.is_alive():
            if coro is not None:
                coro.close()
            self._check_alive()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result in this thread.

        Ctrl-C (KeyboardInterrupt) here cancels the coroutine on the loop - each
        operation turns its cancellation into the right interrupt (a send
        interrupts the program) - waits (bounded) for it to wind up, then
        propagates.  A Ctrl-C that strikes before this thread is waiting - the
        coroutine handed in, or not yet - is one too: it reached nothing (an
        open went on to make a session nobody was told of).
        """
        self._check_may_wait(coro)
        result: Handoff[T] = Handoff()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:
            tasks.append(self.loop.create_task(coro))
            tasks[0].add_done_callback(_handed_over(result))

        def cancel() -> None:  # (on the loop, after start() if it was handed in at all)
            if tasks:
                tasks[0].cancel()
            else:
                coro.close()
                result.set_result(None)  # type: ignore[arg-type]

        try:
            self._hand_in(start)
            return result.result()
        except KeyboardInterrupt:
            self._hand_in(cancel)
            try:
                result.result(timeout=10)
            except (Exception, asyncio.CancelledError):  # (how it wound up does not matter: the Ctrl-C does)
                pass
            raise

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` (run on the private loop) from any other event loop.

        Cancelling the awaiting task cancels the coroutine on the loop - a send interrupts its program - and
        waits (10 s at most) for it to wind up before the cancellation propagates, as :meth:`run` does for a
        Ctrl-C: the session is free again when the cancelled call returns.  (Through ``wrap_future`` the
        caller had its ``CancelledError`` at once, while the send still held the session: a call made right
        after it was refused as busy.)  A second cancellation meanwhile ends the wait.
        """
        if self.in_loop_thread():
            return await coro
        self._check_may_wait(coro)
        caller = asyncio.get_running_loop()
        result: asyncio.Future[T] = caller.create_future()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:
            tasks.append(self.loop.create_task(coro))
            tasks[0].add_done_callback(_passed_to(caller, result))

        def cancel() -> None:  # (on the loop, after start() if it was handed in at all)
            if tasks:
                tasks[0].cancel()
            else:
                coro.close()
                _on_loop_of(caller, result.cancel)

        self._hand_in(start)
        try:
            return await asyncio.shield(result)
        except asyncio.CancelledError:
            self._hand_in(cancel)
            try:
                await asyncio.wait_for(asyncio.shield(result), timeout=10)
            except (Exception, asyncio.CancelledError):  # (how it wound up does not matter: the cancel does)
                pass
            raise

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a plain function on the loop thread and return its result.

        One hop through the inbox (:meth:`_hand_in`), no task: the cheapest way in.
        """
        if self.in_loop_thread():
            return fn(*args)
        result: Handoff[T] = Handoff()

        def invoke() -> None:
            try:
                result.set_result(fn(*args))
            except BaseException as exc:
                result.set_exception(exc)

        self._hand_in(invoke)
        return result.result()

    def call_and_wait(self, start: Callable[[], "Completion[T]"],
                      on_interrupt: Callable[[], Any] | None = None) -> T:
        """Run ``start()`` on the loop (it returns a loop future, or anything with its
        ``add_done_callback``) and wait here for that future.

        The hot path of a foreground send: one hop in, one hop out, no task
        creation in between.  On KeyboardInterrupt, ``on_interrupt()`` runs on
        the loop and the wait continues (bounded) before the interrupt propagates;
        each further KeyboardInterrupt meanwhile runs it again (a second Ctrl-C).
        """
        self._check_may_wait()
        result: Handoff[T] = Handoff()
        ran: list[bool] = []

        def invoke() -> None:
            ran.append(True)
            try:
                start().add_done_callback(_handed_over(result))
            except BaseException as exc:
                result.set_exception(exc)

        def interrupt() -> None:  # (on the loop, after invoke() if it was handed in at all)
            if ran:
                on_interrupt()  # type: ignore[misc]
            else:
                result.set_result(None)  # type: ignore[arg-type]

        try:
            self._hand_in(invoke)  # (a Ctrl-C right after it, before the wait, must reach the call too)
            return result.result()
        except KeyboardInterrupt:
            if on_interrupt is not None:
                self._wind_up(result, interrupt)
            raise

    def _wind_up(self, result: Handoff[Any], interrupt: Callable[[], Any]) -> None:
        """Run ``interrupt()`` on the loop and wait (10 s at most) for ``result``; run it again at each
        KeyboardInterrupt meanwhile.  Handed in as the call was, so it runs after the call started."""
        deadline = time.monotonic() + 10
        while True:
            try:
                self._hand_in(interrupt)
                result.result(timeout=max(deadline - time.monotonic(), 0.0))
                return
            except KeyboardInterrupt:
                continue
            except BaseException:
                return


def _handed_over(result: Handoff[T]) -> Callable[["asyncio.Future[T]"], None]:
    """A done callback that hands a loop future's outcome to ``result``."""
    def copy(done: "asyncio.Future[T]") -> None:
        if done.cancelled():
            result.set_exception(asyncio.CancelledError())
        elif done.exception() is not None:
            result.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            result.set_result(done.result())
    return copy


def _passed_to(caller: asyncio.AbstractEventLoop, result: "asyncio.Future[T]") -> Callable[["asyncio.Future[T]"], None]:
    """A done callback that passes a loop future's outcome to ``result``, a future of the ``caller`` loop."""
    def copy(done: "asyncio.Future[T]") -> None:
        _on_loop_of(caller, _copy_outcome, done, result)
    return copy


def _copy_outcome(done: "asyncio.Future[T]", result: "asyncio.Future[T]") -> None:
    """Give ``result`` the outcome of ``done`` (on ``result``'s loop), unless a cancel settled it first."""
    if result.done():
        return
    if done.cancelled():
        result.cancel()
    elif (error := done.exception()) is not None:
        result.set_exception(error)
    else:
        result.set_result(done.result())


def _on_loop_of(caller: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on the ``caller`` loop soon; nothing if that loop has closed (nobody waits then)."""
    try:
        caller.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def _forget_the_parents_loop() -> None:
    """In a forked child: the loop thread, and every session on it, stayed in the parent; the next
    :meth:`EventLoopThread.shared` starts one of this process's own (its lock may have been held at the fork)."""
    EventLoopThread._shared = None
    EventLoopThread._shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_loop)
