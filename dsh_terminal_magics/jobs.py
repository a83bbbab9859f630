"""Jobs layer (the seed's ``ctx.jobs``): generic background work with incremental output.

A job is started with a declared *kind*, a label, an owner, an output byte
limit and a *run* function.  ``run()`` is called on the private loop thread
with the new job id and returns a :class:`JobHandle`: how to cancel it, an awaitable outcome, and
a function that returns the output produced since its previous call.  The
registry owns ids (opaque, owner-fenced like session ids), statuses
(``running``, ``completed``, ``killed``, ``failed``) and the final detail.
Each :meth:`JobRegistry.output` call returns only output no earlier call
returned; what does not fit the caller's byte budget is kept for the next call.
A finished job keeps its unread output and final detail but lets go of its
run; each owner's newest :data:`MAX_FINISHED_JOBS` finished jobs are remembered.

The operations are coroutines on the private loop; ``jobs.sync`` and
``jobs.aio`` run them from other threads and other event loops.
"""
from __future__ import annotations

import builtins

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable, cast

from .errors import InvalidArgumentError, TerminalError, UnknownJobError
from .mechanism.event_loop import EventLoopThread, LoopProxy
from .owners import new_id
from .vocabulary import JobStatus

#: Bytes of output a read may return, given the status and detail it will show.
Budget = Callable[[str, "str | None"], int]


@dataclass
class JobOutcome:
    """How a job ended."""

    status: JobStatus
    detail: str = ""


@dataclass
class JobHandle:
    """What a job's run function returns."""

    cancel: Callable[[], None]
    done: Awaitable[JobOutcome]
    read_output: Callable[[], str]


@dataclass
class JobRead:
    """One incremental read of a job."""

    job_id: str
    status: JobStatus
    output: str
    detail: str | None
    more: bool = False


@dataclass
class JobInfo:
    """A job snapshot for listings."""

    job_id: str
    kind: str
    label: str
    status: JobStatus
    detail: str | None


@dataclass
class Job:
    job_id: str
    kind: str
    label: str
    owner: object
    output_limit: int
    handle: JobHandle | None = None
    status: JobStatus = "running"
    detail: str | None = None
    carry: str = ""
    finished: asyncio.Future[None] | None = None


#: Most unread output one job keeps for later ``job_output`` calls (bytes; the oldest is dropped first).
MAX_RETAINED_OUTPUT_BYTES = 1024 * 1024
#: Finished jobs remembered per owner (the oldest are forgotten first; running jobs are always kept).
MAX_FINISHED_JOBS = 256


def _nothing() -> None:
    return None


def keep_newest_bytes(text: str, limit: int) -> str:
    """``text`` cut to its newest ``limit`` UTF-8 bytes, with a line saying how much was dropped."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    kept = data[len(data) - limit:].decode("utf-8", "ignore")
    return f"[{len(data) - len(kept.encode('utf-8', 'surrogatepass'))} bytes of unread output dropped]\n" + kept


def split_utf8(text: str, budget: int) -> tuple[str, str]:
    """Split ``text`` so the head is at most ``budget`` UTF-8 bytes, preferring a line break."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= budget:
        return text, ""
    head = data[: max(budget, 0)].decode("utf-8", "ignore")
    cut = head.rfind("\n")
    if cut >= len(head) // 2:
        head = head[: cut + 1]
    return head, text[len(head):]


class JobRegistry:
    """Background jobs, fenced by owner; all state lives on the private loop."""

    def __init__(self, loop_thread: EventLoopThread | None = None) -> None:
        self._loop = loop_thread or EventLoopThread.shared()
        self.sync = LoopProxy(self, self._loop, blocking=True)
        self.aio = LoopProxy(self, self._loop, blocking=False)
        self._jobs: dict[str, Job] = {}
        self._kinds: set[str] = set()

    def declare_kind(self, kind: str) -> None:
        """Allow jobs of ``kind`` (for example ``"pty-send"``)."""
        self._kinds.add(kind)

    # -- operations (coroutines on the loop) ---------------------------------------
    def job(self, owner: object, job_id: object) -> Job:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None or job.owner is not owner:
            raise UnknownJobError(str(job_id))
        return job

    async def start(self, kind: str, label: str, owner: object, output_limit: int,
                    run: Callable[[str], JobHandle]) -> str:
        """Start a job; ``run(job_id)`` is called on the loop thread.  Returns the job id."""
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        if kind not in self._kinds:
            raise InvalidArgumentError(f"job kind {kind!r} is not declared: declare it with declare_kind first")
        job = Job(new_id("j"), kind, label, owner, output_limit)
        job.handle = run(job.job_id)  # may raise: then no job exists
        job.finished = self._loop.loop.create_future()
        self._jobs[job.job_id] = job
        self._loop.loop.create_task(self._watch(job))
        return job.job_id

    async def _watch(self, job: Job) -> None:
        assert job.handle is not None and job.finished is not None
        try:
            outcome = await job.handle.done
        except Exception as exc:
            outcome = JobOutcome("failed", f"{type(exc).__name__}: {exc}")
        job.status, job.detail = outcome.status, outcome.detail
        # Keep what no one has read yet, then let go of the run (and the session it holds).
        job.carry = keep_newest_bytes(job.carry + job.handle.read_output(), MAX_RETAINED_OUTPUT_BYTES)
        job.handle = JobHandle(cancel=_nothing, done=cast("Awaitable[JobOutcome]", job.finished), read_output=str)
        job.finished.set_result(None)
        self._forget_old_jobs(job.owner)

    def _forget_old_jobs(self, owner: object) -> None:
        """Keep ``owner``'s newest finished jobs: another owner's jobs never evict these."""
        finished = [j for j in self._jobs.values() if j.status != "running" and j.owner is owner]
        for job in finished[: max(0, len(finished) - MAX_FINISHED_JOBS)]:
            del self._jobs[job.job_id]

    async def output(self, owner: object, job_id: str, budget: Budget | None = None) -> JobRead:
        """New output since the last call, status, detail.

        At most ``budget(status, detail)`` bytes (default: the job's output limit)
        are returned; the rest waits for the next call.
        """
        job = self.job(owner, job_id)
        assert job.handle is not None
        status, detail = job.status, job.detail  # read before the output so a final read is complete
        text = keep_newest_bytes(job.carry + job.handle.read_output(), MAX_RETAINED_OUTPUT_BYTES)
        limit = budget(status, detail) if budget is not None else job.output_limit
        head, job.carry = split_utf8(text, limit)
        return JobRead(job.job_id, status, head, detail, more=bool(job.carry))

    async def kill(self, owner: object, job_id: str) -> JobStatus:
        """Cancel a running job and wait until it has ended; returns its final status."""
        job = self.job(owner, job_id)
        assert job.handle is not None and job.finished is not None
        if job.status == "running":
            job.handle.cancel()
            await asyncio.shield(job.finished)
        return job.status

    async def list(self, owner: object) -> builtins.list[JobInfo]:
        """Snapshots of ``owner``'s jobs."""
        return [JobInfo(j.job_id, j.kind, j.label, j.status, j.detail)
                for j in self._jobs.values() if j.owner is owner]

    async def close_owner(self, owner: object | None) -> None:
        """Cancel and forget every job of ``owner`` (of everyone when ``None``)."""
        jobs = [j for j in self._jobs.values() if owner is None or j.owner is owner]
        for job in jobs:
            if job.status == "running" and job.handle is not None:
                job.handle.cancel()
        for job in jobs:
            if job.finished is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(job.finished), timeout=10)
                except asyncio.TimeoutError:
                    pass
            self._jobs.pop(job.job_id, None)
