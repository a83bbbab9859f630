# dsh_terminal_magics shell integration, read by `bash --rcfile`.
# The user's own rc file is read first (only when DSH_TERMINAL_USER_RC names one),
# then the settings the session relies on are asserted again, so no rc file can
# break them: a fixed prompt, bracketed paste off, and an OSC 133;D marker that
# carries the exit status of every command.
if [ -n "${DSH_TERMINAL_USER_RC:-}" ] && [ -r "${DSH_TERMINAL_USER_RC}" ]; then
    . "${DSH_TERMINAL_USER_RC}"
fi
bind 'set enable-bracketed-paste off' 2>/dev/null
__dsh_terminal_prompt() {
    local status=$?
    printf '\033]133;D;%s\007' "$status"
    PS1='$ '
    PS2='> '
    return $status
}
PROMPT_COMMAND=__dsh_terminal_prompt
unset HISTFILE
