"""The capped renderer, and property tests over any output and any cap >= 64."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_terminal_magics.tools import MARKER, render_capped, result_text, truncate_utf8, truncate_utf8_tail
from dsh_terminal_magics.tools.models import (BackgroundSendResult, ForegroundSendResult, JobOutputResult,
                                              OpenResult, ReadResult)

ID = "t-0123456789abcdef"


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_truncation_respects_utf8_boundaries():
    text = "ab✓✓✓"
    assert truncate_utf8(text, 4) == "ab"
    assert truncate_utf8_tail(text, 4) == "✓"
    assert truncate_utf8(text, 100) == text


def test_fits_without_marker():
    assert render_capped(["[wait: stdin_read]"], "hi", 64) == "[wait: stdin_read]\nhi"


def test_tail_kept_for_viewports():
    out = render_capped(["[m]"], "old " * 100 + "NEWEST", 64, keep_tail=True)
    assert out.startswith("[m]\n" + MARKER) and out.endswith("NEWEST") and size(out) <= 64


def test_creation_acknowledgements_show_the_whole_id_at_64_bytes():
    opened = OpenResult(session_id=ID, type="shell", pid=123456, status="running", name="n" * 40, motd="m" * 500)
    assert ID in result_text(opened, 64) and size(result_text(opened, 64)) <= 64
    bg = BackgroundSendResult(job_id="j-0123456789abcdef")
    assert "j-0123456789abcdef" in result_text(bg, 64)


texts = st.one_of(st.text(max_size=3000),
                  st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "replace")),
                  st.just("x" * 200_000), st.text(alphabet="\x1b[0123456789;m✓\n\r", max_size=2000))


@settings(max_examples=400, deadline=None)
@given(texts, st.integers(min_value=64, max_value=5000),
       st.sampled_from(["stdin_read", "inferred_idle", "timeout", "session_exit"]),
       st.sampled_from(["running", "exited", "closing"]), st.one_of(st.none(), st.integers(-255, 255)),
       st.booleans())
def test_send_results_always_within_cap_with_metadata(viewport, cap, reason, status, code, cut):
    r = ForegroundSendResult(viewport=viewport, wait_reason=reason, session_status=status, truncated=cut,
                             exit_code=code)
    out = result_text(r, cap)
    out.encode("utf-8")  # valid UTF-8
    assert size(out) <= cap
    assert out.startswith(f"[wait: {reason}] [session: {status}]")
    fits = size(f"[wait: {reason}] [session: {status}]" + (f" [exit: {code}]" if code is not None else "")
                + ("\n" + viewport if viewport else "")) <= cap
    assert (MARKER in out) == (cut or not fits)


@settings(max_examples=200, deadline=None)
@given(texts, st.integers(min_value=64, max_value=3000), st.booleans())
def test_read_and_job_results_within_cap(text, cap, more):
    read = ReadResult(text=text, total_lines=10**6, line_begin=10**5, line_end=10**6, truncated=more)
    out = result_text(read, cap)
    assert size(out) <= cap and out.startswith("[lines: 100000-1000000 of 1000000]")
    job = JobOutputResult(job_id="j-0123456789abcdef", status="completed", output=text,
                          detail="waitReason=stdin_read sessionStatus=running exitCode=0")
    job._more = more
    out = result_text(job, cap)
    assert size(out) <= cap and out.startswith("[job: j-0123456789abcdef] [status: completed]")
    if more:
        assert MARKER in out
