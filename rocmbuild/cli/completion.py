"""``rocmbuild completion bash|zsh|fish``: a shell completion script that asks rocmbuild at Tab time.

Decisions:

* The script is thin: on Tab it runs ``rocmbuild __complete WORD...`` (``complete.py``) with the
  words of the line, and offers what that prints. So the verbs, options, recipes, conda env
  names and transaction ids are those of now, never those of the day the script was made, and
  the three shells offer the same words from one implementation (no ``argcomplete`` needed: its
  design, the program answering for itself, without a dependency).
* The program asked is the line's first word (``~/`` expanded), so the ``rocmbuild`` of the venv
  on PATH answers for itself. A failing answer offers nothing, silently.
* The answer's first line says what the shell adds from its own file completion (``files``,
  ``dirs``, ``toml``); each driver maps it onto its own (``compgen``; ``_files``;
  ``__fish_complete_path``). bash's ``compgen`` answers one name per line, so its lines are read
  whole (``mapfile``: never split on spaces nor globbed) and kept only when they name an existing
  file, hold no control character and start with ``-`` only if the word typed does (a file
  ``evil\\n--inject.toml`` is no candidate at all, not two).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # imported when the verb runs, not on every Tab
    from rocmbuild.results import CompletionResult

SHELLS = ("bash", "zsh", "fish")
HELP = """\
print a completion script for bash, zsh or fish; it asks rocmbuild at Tab time, so new recipes,
envs and transactions complete without making it again. Install (docs/completion.md):
  bash: rocmbuild completion bash > ~/.local/share/bash-completion/completions/rocmbuild
  zsh:  rocmbuild completion zsh > ~/.zfunc/_rocmbuild   (with fpath+=~/.zfunc before compinit)
  fish: rocmbuild completion fish > ~/.config/fish/completions/rocmbuild.fish"""


def add(sub) -> None:
    p = sub.add_parser("completion", help="print a bash, zsh or fish completion script", description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> CompletionResult:
    from rocmbuild.results import CompletionResult

    return CompletionResult(args.shell, script(args.shell))


def parsers_under(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``p`` and every parser of its sub-verbs (a verb such as ``cache list``), depth first."""
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from parsers_under(child)


_BASH = r'''
_rocmbuild() {
  local cur="${COMP_WORDS[COMP_CWORD]}" exe="${COMP_WORDS[0]}" mode
  local -a lines
  [[ "$exe" == "~/"* ]] && exe="$HOME/${exe#"~/"}"
  COMPREPLY=()
  mapfile -t lines < <(command "$exe" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
  (( ${#lines[@]} )) || return 0
  mode="${lines[0]}"
  COMPREPLY=("${lines[@]:1}")
  local -a found
  case "$mode" in
    files) mapfile -t found < <(compgen -f -- "$cur") ;;
    dirs) mapfile -t found < <(compgen -d -- "$cur") ;;
    toml) mapfile -t found < <(compgen -f -X '!*.toml' -- "$cur") ;;
  esac
  local c
  for c in "${found[@]}"; do
    [[ -e "${c/#\~/$HOME}" || -L "${c/#\~/$HOME}" ]] || continue
    [[ "$c" == *[[:cntrl:]]* ]] && continue
    [[ "$c" == -* && "$cur" != -* ]] && continue
    COMPREPLY+=("$c")
  done
  return 0
}
complete -o filenames -F _rocmbuild rocmbuild
'''

_ZSH = r'''
_rocmbuild() {
  local mode
  local -a lines
  lines=("${(@f)$(command ${~words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
  mode="${lines[1]}"
  lines=("${(@)lines[2,-1]:#}")
  (( ${#lines} )) && compadd -- "${lines[@]}"
  case "$mode" in
    files) _files ;;
    dirs) _files -/ ;;
    toml) _files -g '*.toml' ;;
  esac
}
if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then
  _rocmbuild "$@"
else
  compdef _rocmbuild rocmbuild
fi
'''

_FISH = r'''
function __rocmbuild_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l out (command $words[1] __complete $words[2..-1] "$cur" 2>/dev/null)
    or return 0
    test (count $out) -gt 0; or return 0
    printf '%s\n' $out[2..-1]
    switch $out[1]
        case files
            __fish_complete_path "$cur"
        case dirs
            __fish_complete_directories "$cur"
        case toml
            __fish_complete_suffix .toml
    end
end
complete -c rocmbuild -f -a '(__rocmbuild_complete)'
'''

_DRIVERS = {"bash": _BASH, "zsh": _ZSH, "fish": _FISH}


def script(shell: str) -> str:
    head = (f"# {shell} completion for rocmbuild, made by `rocmbuild completion {shell}`;\n"
            "# on Tab it runs `rocmbuild __complete WORD...`, so what it offers is always current\n")
    if shell == "zsh":
        head = "#compdef rocmbuild\n" + head
    return head + _DRIVERS[shell].lstrip("\n")
