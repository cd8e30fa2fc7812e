"""``rocmbuild completion bash|zsh``: a shell completion script made from the real parser.

Decisions:

* The script is generated from the argparse tree ``app.build_parser`` made (verbs, each verb's
  options and sub-verbs, choices), so a verb or option added later completes without an edit
  here. Recipe names are those found when the script is made (``rocmbuild recipes``), and a
  recipe argument also completes ``*.toml`` files; ``-n`` completes the env names found in the
  usual conda envs directories when Tab is pressed.
* A value's kind follows its metavar: ``PREFIX``/``DIR`` complete directories, ``FILE``/``PATH``/
  ``EXE`` files, choices their words, anything else nothing (a version, a sha).
* bash and zsh share the data functions (plain POSIX ``case`` text both shells read); each
  gets its own small driver (``COMP_WORDS``/``COMPREPLY``; ``words``/``compadd``).
"""

from __future__ import annotations

import argparse
import re
from typing import Iterator

from rocmbuild.results import CompletionResult

SHELLS = ("bash", "zsh")
RECIPE_ARGS = ("recipe", "what")
_SAFE = re.compile(r"^[A-Za-z0-9_.,:+@%=/-]+$")  # words that need no quoting in the script


def add(sub) -> None:
    p = sub.add_parser("completion", help="print a bash or zsh completion script")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> CompletionResult:
    return CompletionResult(args.shell, script(args.shell, parser))


def parsers_under(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``p`` and every parser of its sub-verbs (a verb such as ``cache list``), depth first."""
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from parsers_under(child)


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _kind(action: argparse.Action) -> str:
    if action.choices:
        return "choice:" + " ".join(map(str, action.choices))
    meta = str(action.metavar or action.dest).upper()
    if action.dest == "env_name":
        return "envname"
    if "PREFIX" in meta or "DIR" in meta:
        return "dir"
    if any(w in meta for w in ("FILE", "PATH", "EXE")):
        return "file"
    return "none"


def _words(words) -> str:
    return " ".join(w for w in words if _SAFE.match(w))


def _spec(p: argparse.ArgumentParser) -> tuple[list[str], dict[str, str], list[str], bool]:
    """(options, {option: value kind}, positional words, takes a recipe) of one verb."""
    opts: list[str] = []
    values: dict[str, str] = {}
    positional: list[str] = []
    recipe = False
    for each in parsers_under(p):
        for action in each._actions:
            if action.option_strings:
                opts += [o for o in action.option_strings if o not in opts]
                if action.nargs != 0:
                    values.update({o: _kind(action) for o in action.option_strings})
            elif isinstance(action, argparse._SubParsersAction) or action.choices:
                positional += [str(c) for c in action.choices if str(c) not in positional]
            elif action.dest in RECIPE_ARGS:
                recipe = True
    return opts, values, positional, recipe


def _recipe_names() -> list[str]:
    from rocmbuild import recipe

    try:
        return sorted({name for name, _ in recipe.available(())})
    except Exception:  # noqa: BLE001 - a broken recipe dir must not break completion
        return []


def _data(parser: argparse.ArgumentParser) -> str:
    """The shell functions both drivers call: verbs, options, value kinds, positionals."""
    verbs = _verbs(parser)
    top_opts = [o for a in parser._actions for o in a.option_strings]
    opt_cases, value_cases, pos_cases = [], [], []
    for name, p in verbs.items():
        opts, values, positional, recipe = _spec(p)
        opt_cases.append(f"    {name}) echo '{_words(opts)}' ;;")
        for kind in sorted(set(values.values())):
            value_cases.append(_value_case(name, [o for o, k in values.items() if k == kind], kind))
        pos_cases.append(f"    {name}) echo '{_words(positional)}'{' recipe' if recipe else ''} ;;")
    return "\n".join([
        f"_rocmbuild_verbs='{_words(verbs)}'",
        f"_rocmbuild_globals='{_words(top_opts)}'",
        f"_rocmbuild_recipes='{_words(_recipe_names())}'",
        "_rocmbuild_opts() {\n  case \"$1\" in\n" + "\n".join(opt_cases) + "\n  esac\n}",
        "# the kind of value the option $2 of verb $1 takes: file, dir, envname, choice:WORDS, none;"
        " empty: a flag\n_rocmbuild_value_kind() {\n  case \"$1 $2\" in\n" + "\n".join(value_cases)
        + "\n  esac\n}",
        "# the words of verb $1's positionals (the last word 'recipe': it also takes a recipe)\n"
        "_rocmbuild_positional() {\n  case \"$1\" in\n" + "\n".join(pos_cases) + "\n  esac\n}",
        "_rocmbuild_envnames() {\n  local d e\n"
        "  for d in ${CONDA_ENVS_PATH//:/ } ~/miniconda3/envs ~/anaconda3/envs ~/miniforge3/envs ~/.conda/envs; do\n"
        "    for e in \"$d\"/*/conda-meta; do [ -d \"$e\" ] && e=${e%/conda-meta} && echo \"${e##*/}\"; done\n"
        "  done\n}",
    ])


def _value_case(verb: str, options: list[str], kind: str) -> str:
    pattern = "|".join(f"'{verb} {o}'" for o in options if _SAFE.match(o))
    words = kind.split(":", 1)
    value = f"choice:{_words(words[1].split())}" if words[0] == "choice" else kind
    return f"    {pattern}) echo '{value}' ;;"


_BASH = r'''
_rocmbuild() {
  local cur prev verb kind i w
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  verb=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    if [[ " $_rocmbuild_verbs " == *" $w "* ]]; then verb="$w"; break; fi
  done
  if [[ -n "$verb" && "$prev" == -* ]]; then
    kind="$(_rocmbuild_value_kind "$verb" "$prev")"
    case "$kind" in
      file) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
      dir) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
      envname) COMPREPLY=($(compgen -W "$(_rocmbuild_envnames)" -- "$cur")); return 0 ;;
      choice:*) COMPREPLY=($(compgen -W "${kind#choice:}" -- "$cur")); return 0 ;;
      none) return 0 ;;
    esac
  fi
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$_rocmbuild_globals $(_rocmbuild_opts "$verb")" -- "$cur"))
  elif [[ -z "$verb" ]]; then
    COMPREPLY=($(compgen -W "$_rocmbuild_verbs" -- "$cur"))
  else
    local words
    words="$(_rocmbuild_positional "$verb")"
    if [[ " $words " == *" recipe "* ]]; then
      words="${words% recipe} $_rocmbuild_recipes"
      words="${words#recipe }"
      COMPREPLY=($(compgen -W "$words" -- "$cur") $(compgen -f -X '!*.toml' -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
  fi
  return 0
}
complete -o filenames -F _rocmbuild rocmbuild
'''

_ZSH = r'''
_rocmbuild() {
  local cur prev verb kind i
  local -a verbs words_
  verbs=(${=_rocmbuild_verbs})
  cur="${words[CURRENT]}"
  prev="${words[CURRENT-1]}"
  verb=""
  for (( i = 2; i < CURRENT; i++ )); do
    if (( ${verbs[(Ie)${words[i]}]} )); then verb="${words[i]}"; break; fi
  done
  if [[ -n "$verb" && "$prev" == -* ]]; then
    kind="$(_rocmbuild_value_kind "$verb" "$prev")"
    case "$kind" in
      file) _files; return ;;
      dir) _files -/; return ;;
      envname) compadd -- ${(f)"$(_rocmbuild_envnames)"}; return ;;
      choice:*) compadd -- ${=kind#choice:}; return ;;
      none) return 1 ;;
    esac
  fi
  if [[ "$cur" == -* ]]; then
    compadd -- ${=_rocmbuild_globals} ${=$(_rocmbuild_opts "$verb")}
  elif [[ -z "$verb" ]]; then
    compadd -- $verbs
  else
    words_=(${=$(_rocmbuild_positional "$verb")})
    if (( ${words_[(Ie)recipe]} )); then
      words_=(${words_:#recipe} ${=_rocmbuild_recipes})
      compadd -- $words_
      _files -g '*.toml'
    else
      compadd -- $words_
    fi
  fi
}
if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then
  _rocmbuild "$@"
else
  compdef _rocmbuild rocmbuild
fi
'''


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    head = f"# {shell} completion for rocmbuild, made by `rocmbuild completion {shell}` from its parser\n"
    if shell == "zsh":
        head = "#compdef rocmbuild\n" + head
    return head + _data(parser) + "\n" + (_ZSH if shell == "zsh" else _BASH).lstrip("\n")
