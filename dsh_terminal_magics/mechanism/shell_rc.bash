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
# The marker, and the prompt asserted again, at every prompt (on the round trip of every send: written for speed).
# From bash 5.1 on PROMPT_COMMAND is a list: the status is taken first (element 0, which hands it on to what
# follows) and the marker printed last (element 99), so a command that sets PROMPT_COMMAND (`PROMPT_COMMAND='history
# -a'`, a tool's hook put in front) replaces element 0 only: for that one prompt the status is not known (the marker
# says so, with an empty status), and taking it is put back in front of what element 0 now holds.  Older bash runs
# element 0 only: there the marker is element 0, and a command that sets PROMPT_COMMAND ends the markers.
if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 501)); then
    __dsh_terminal_capture() {
        __dsh_terminal_status=${__dsh_terminal_status:-$?}
        return "$__dsh_terminal_status"
    }
    __dsh_terminal_prompt() {
        [[ ${PROMPT_COMMAND[0]-} == __dsh_terminal_capture* ]] || {
            __dsh_terminal_status=
            PROMPT_COMMAND[0]="__dsh_terminal_capture${PROMPT_COMMAND[0]:+; ${PROMPT_COMMAND[0]}}"
        }
        printf '\033]133;D;%s;%s\007' "${__dsh_terminal_status-}" "$__dsh_terminal_key"
        PS1='$ ' PS2='> '
        set -- "${__dsh_terminal_status:-0}"
        __dsh_terminal_status=
        return "$1"
    }
    PROMPT_COMMAND=(__dsh_terminal_capture)
    PROMPT_COMMAND[99]=__dsh_terminal_prompt
else
    __dsh_terminal_prompt() {
        local status=$?
        printf '\033]133;D;%s;%s\007' "$status" "$__dsh_terminal_key"
        PS1='$ ' PS2='> '
        return $status
    }
    PROMPT_COMMAND=__dsh_terminal_prompt
fi
unset HISTFILE
