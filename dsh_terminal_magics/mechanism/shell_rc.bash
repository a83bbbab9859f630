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
# The marker is part of the prompt: PS1 holds it, with $? expanded as each prompt is drawn (promptvars), so
# readline writes the marker and '$ ' in one write.  Printed from PROMPT_COMMAND, the marker went out on a write of
# its own ahead of the prompt - the reader woke twice on every round trip (a round trip through pexpect 0.48 ms
# against 0.32 ms this way) - and the two functions that printed it cost the shell a third more CPU per command.
# PROMPT_COMMAND only sets the prompt again, so no command can change it for good; as bash (4.3 on) restores $?
# after every PROMPT_COMMAND command, the status drawn is the command line's whatever else PROMPT_COMMAND holds or
# whether it is there at all.  From bash 5.1 on PROMPT_COMMAND is a list and ours is its element 99: a command that
# sets PROMPT_COMMAND (`PROMPT_COMMAND='history -a'`, a tool's hook put in front) replaces element 0 only.  A
# command that sets PS1 itself ends the markers until PROMPT_COMMAND sets it back: the marker is gone, not wrong.
# A prompt that ends with ours is kept: a virtualenv's or conda's `activate` puts "(venv) " in front of it, and the
# prompt says which environment commands run in.  PS1 is never left exported: `activate` exports it, and every
# program started after would have found the key in its environment (a program could forge the marker).
__dsh_terminal_ps1='\[\e]133;D;$?;'"$__dsh_terminal_key"'\a\]$ '
__dsh_terminal_reprompt='[[ $PS1 == *"$__dsh_terminal_ps1" ]] || PS1=$__dsh_terminal_ps1; declare +x PS1 PS2="> "'
eval "$__dsh_terminal_reprompt"
shopt -s promptvars
if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 501)); then
    PROMPT_COMMAND=()
    PROMPT_COMMAND[99]=$__dsh_terminal_reprompt
else
    PROMPT_COMMAND=$__dsh_terminal_reprompt
fi
export -n PS1 PS2 PROMPT_COMMAND
unset HISTFILE
