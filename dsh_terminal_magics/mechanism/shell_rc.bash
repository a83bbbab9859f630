# dsh_terminal_magics shell integration, read by `bash --rcfile`.
# The user's own rc file is read first (only when DSH_TERMINAL_USER_RC names one),
# then the settings the session relies on are asserted again, so no rc file can
# break them: a fixed prompt, bracketed paste off, TAB and '!' typed as themselves, and an OSC 133;D marker that
# carries the exit status of every command (and the session's key, below).
if [ -n "${DSH_TERMINAL_USER_RC:-}" ] && [ -r "${DSH_TERMINAL_USER_RC}" ]; then
    . "${DSH_TERMINAL_USER_RC}"
fi
bind 'set enable-bracketed-paste off' 2>/dev/null
# Sent text is typed: a TAB in it is a tab (a Makefile's recipe line), not a completion request, and a '!'
# is a character ("a!b"), not a history expansion that throws the whole line away.
bind 'set disable-completion on' 2>/dev/null
set +H
# The marker carries a key drawn here, before any command runs (a shell variable, not exported): the
# session learns it from the first marker and ignores markers that lack it - a program's output forging one.
__dsh_terminal_key="${SRANDOM}${SRANDOM}${RANDOM}${RANDOM}"
__dsh_terminal_prompt() {
    local status=$?
    printf '\033]133;D;%s;%s\007' "$status" "$__dsh_terminal_key"
    PS1='$ '
    PS2='> '
    return $status
}
PROMPT_COMMAND=__dsh_terminal_prompt
unset HISTFILE
