"""Cards: one per call, in order, escaped like the viewport."""
from __future__ import annotations

from dsh_terminal_magics import TerminalTools
from dsh_terminal_magics.notebook.cards import show_cards
from dsh_terminal_magics.tools.policies import deny_commands


def test_cards_stack_in_order_and_escape_output(agent):
    tools = TerminalTools()
    try:
        cards = show_cards(tools, display=False)
        sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
        tools.call("terminal_send", {"sessionId": sid, "text": "printf '\\e[31m<b>&red</b>\\e[0m\\n'"},
                   agent=agent)
        tools.call("terminal_send", {"sessionId": sid, "text": "sleep 1", "run_in_background": True}, agent=agent)
        tools.call_text("terminal_read", {"sessionId": "t-0000000000000000"}, agent=agent)
        tools.add_policy(deny_commands(["danger"]))
        tools.call_text("terminal_send", {"sessionId": sid, "text": "echo danger"}, agent=agent)
        tools.call("terminal_list", {}, agent=agent)
        tools.call("terminal_close", {"sessionId": sid}, agent=agent)
        kinds = [c.split('class="dsh-card dsh-card-', 1)[1].split('"', 1)[0] for c in cards.cards]
        assert kinds == ["execute", "terminal", "execute", "error", "denied", "read", "delete"]
        terminal = cards.cards[1]
        assert "&lt;b&gt;&amp;red&lt;/b&gt;" in terminal and "<b>&red" not in terminal
        assert 'style="color:#cd3131"' in terminal  # colours kept, as spans we wrote
        assert "[wait: stdin_read] [exit: 0]" in terminal
        assert "unknown terminal session" in cards.cards[3]
        cards.close()
        tools.call("terminal_list", {}, agent=agent)
        assert len(cards.cards) == 7
    finally:
        tools.shutdown()


def test_a_secret_sends_card_leaves_the_text_out(agent):
    """``%term_send --secret`` calls with ``secret``: the card of that send does not show the text."""
    tools = TerminalTools()
    try:
        cards = show_cards(tools, display=False)
        sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
        tools.call("terminal_send", {"sessionId": sid, "text": "read -s P"}, agent=agent)
        tools.call("terminal_send", {"sessionId": sid, "text": "s3cr3t-words"}, agent=agent, secret=True)
        assert "s3cr3t" not in cards.cards[-1] and "(a secret: 12 characters, not shown)" in cards.cards[-1]
        assert "read -s P" in cards.cards[-2]
        cards.close()
    finally:
        tools.shutdown()
