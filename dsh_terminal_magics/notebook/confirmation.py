"""Yes/No confirmation in the notebook for :func:`~dsh_terminal_magics.tools.policies.confirm_commands`."""
from __future__ import annotations

import html
import threading
from typing import Iterable, Optional

import ipywidgets as widgets

from ..tools.policies import Policy, ToolCall, confirm_commands, typed_payload


class ConfirmationPrompt:
    """The Yes/No widget: shows exactly what would be typed; answers may come from any thread."""

    def __init__(self, call: ToolCall) -> None:
        self.answer: Optional[bool] = None
        self._event = threading.Event()
        command = "(a secret, not shown)" if call.secret else \
            html.escape(typed_payload(call.args).encode("unicode_escape").decode("ascii"))
        agent = html.escape(str(getattr(call.agent, "name", "agent")))
        self.label = widgets.HTML(f"<b>{agent}</b> wants to type <code>{command}</code> — allow?")
        self.yes = widgets.Button(description="Yes", button_style="success")
        self.no = widgets.Button(description="No", button_style="danger")
        self.yes.on_click(lambda _b: self._answer(True))
        self.no.on_click(lambda _b: self._answer(False))
        self.widget = widgets.VBox([self.label, widgets.HBox([self.yes, self.no])])

    def _answer(self, value: bool) -> None:
        self.answer = value
        self.yes.disabled = self.no.disabled = True
        self._event.set()

    def wait(self, timeout: float) -> bool:
        self._event.wait(timeout)
        return bool(self.answer)


#: The prompt shown most recently (tests and UIs answer it).
LAST_PROMPT: list[ConfirmationPrompt] = []


def widget_confirmation(call: ToolCall, timeout: float) -> bool:
    """Show a Yes/No prompt and wait for the answer (JupyterLab >= 4.4 delivers clicks on a subshell)."""
    from IPython.display import display

    prompt = ConfirmationPrompt(call)
    LAST_PROMPT[:] = [prompt]
    display(prompt.widget)
    return prompt.wait(timeout)


def confirm_in_notebook(patterns: Iterable[str], timeout: float = 300.0, name: str = "confirm") -> Policy:
    """A :func:`confirm_commands` policy that asks the notebook user with Yes/No buttons (no answer: denied)."""
    return confirm_commands(patterns, ask=lambda call: widget_confirmation(call, timeout), name=name)
