"""``rocmbuild __complete WORD...``: the candidates for the last word, asked by the shell at Tab time.

Decisions:

* The completion scripts (``completion.py``) are thin: on Tab they run this hidden verb with the
  words of the line after the program name, the last one the word being completed (maybe
  empty). Every answer comes from the live parser and the live machine, so a verb, an option, a
  recipe, an env or a transaction added after the script was made completes with no new script.
* The answer is a first line naming what the shell adds besides the words (``words``: nothing;
  ``files``, ``dirs``: its own file or directory completion; ``toml``: ``*.toml`` files), then
  one candidate per line, already filtered by the word's prefix. Nothing is ever printed on
  stderr and the exit code is 0: a broken recipe dir or a hanging conda must not break Tab.
* A value's kind follows its option: choices complete their words, ``-n``/``--name`` the conda
  env names (``environment/envs.py``, its tools given a short timeout), a ``TXN`` metavar the ids in
  the target's history (the ``--env``/``-n`` on the line, else ``$CONDA_PREFIX``/``$VIRTUAL_ENV``),
  ``PREFIX``/``DIR`` directories, ``FILE``/``PATH``/``EXE`` files, anything else nothing.
* Only words a user could have typed are offered (issue 26): no candidate holds a control
  character (a file ``evil\\n--inject.toml`` would be two lines, two candidates; an escape
  sequence in a planted history id would act on the terminal), none starts with ``-`` unless the
  word typed does, a recipe name must be one ``rocmbuild`` accepts, a transaction id one a journal
  may have (``swap.journal.TXN_RE``). Dropped, not escaped: an escaped word names nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rocmbuild.names import is_recipe_name, safe_text

RECIPE_ARGS = ("recipe", "what")
TAB_TIMEOUT = 3.0  # seconds a conda tool may take at Tab time


def main(words: list[str]) -> int:
    try:
        from rocmbuild.cli.app import build_parser

        mode, found = candidates(build_parser()[0], words or [""])
    except Exception:  # noqa: BLE001 - Tab must never print a traceback into the user's line
        mode, found = "files", []
    sys.stdout.write("\n".join([mode, *found]) + "\n")
    return 0


def verbs_of(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option(parsers: list[argparse.ArgumentParser], flag: str) -> argparse.Action | None:
    for p in parsers:
        for action in p._actions:
            if flag in action.option_strings:
                return action
    return None


def _walk(parser: argparse.ArgumentParser, before: list[str]) -> tuple[list[argparse.ArgumentParser], dict]:
    """(the parsers in effect: top, verb, sub-verb; {option dest: value} given on the line, and
    under ``None`` the count of positional words given to the last parser)."""
    chain = [parser]
    given: dict = {None: 0}
    i = 0
    while i < len(before):
        w = before[i]
        if w.startswith("-") and w != "-":
            flag, eq, value = w.partition("=")
            action = _option(chain[::-1], flag)
            if action is not None and action.nargs != 0:
                if not eq and i + 1 < len(before):
                    value, i = before[i + 1], i + 1
                given[action.dest] = value
        elif w in verbs_of(chain[-1]):
            chain.append(verbs_of(chain[-1])[w])
            given[None] = 0
        else:
            given[None] += 1
        i += 1
    return chain, given


def candidates(parser: argparse.ArgumentParser, words: list[str]) -> tuple[str, list[str]]:
    """(what the shell adds, the candidate words) for the last of ``words``."""
    cur, before = words[-1], words[:-1]
    chain, given = _walk(parser, before)
    prev = before[-1] if before else ""
    if prev.startswith("-") and "=" not in prev:
        action = _option(chain[::-1], prev)
        if action is not None and action.nargs != 0:
            mode, found = _value(action, given)
            return mode, _match(found, cur)
    if cur.startswith("-"):
        opts: list[str] = []
        for p in chain:
            opts += [o for a in p._actions for o in a.option_strings if o not in opts]
        return "words", _match(opts, cur)
    return _positional(chain[-1], given, cur)


def _match(words, cur: str) -> list[str]:
    """The candidates the shell may be given: those starting with ``cur``, none holding a control
    character (one per line: a newline would make two, an escape would act on the terminal),
    none starting with ``-`` unless ``cur`` does (a name must not become an option)."""
    return [w for w in words if w.startswith(cur) and w and safe_text(w) == w
            and (cur.startswith("-") or not w.startswith("-"))]


def _positional(p: argparse.ArgumentParser, given: dict, cur: str) -> tuple[str, list[str]]:
    words: list[str] = list(verbs_of(p))
    mode = "words"
    positionals = [a for a in p._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    done = given[None]  # the positionals already given (one word each; a list takes the rest)
    for action in positionals[done:done + 1] or positionals[-1:]:
        if action.nargs not in ("*", "+") and action not in positionals[done:]:
            continue
        if action.choices:
            words += [str(c) for c in action.choices]
        elif action.dest in RECIPE_ARGS:
            words += recipe_names(given.get("recipes_dir"))
            mode = "toml"
        elif "TXN" in str(action.metavar or ""):
            words += txn_ids(given)
    return mode, _match(words, cur)


def _value(action: argparse.Action, given: dict) -> tuple[str, list[str]]:
    if action.choices:
        return "words", [str(c) for c in action.choices]
    meta = str(action.metavar or action.dest).upper()
    if action.dest == "env_name":
        return "words", env_names()
    if "TXN" in meta:
        return "words", txn_ids(given)
    if "PREFIX" in meta or "DIR" in meta:
        return "dirs", []
    if any(w in meta for w in ("FILE", "PATH", "EXE")):
        return "files", []
    return "words", []


def recipe_names(extra=None) -> list[str]:
    from rocmbuild import recipe

    dirs = (extra,) if isinstance(extra, str) else tuple(extra or ())
    try:
        return sorted({name for name, _ in recipe.available(dirs) if is_recipe_name(name)})
    except Exception:  # noqa: BLE001 - a broken recipe dir must not break completion
        return []


def env_names() -> list[str]:
    from rocmbuild.environment import envs

    return sorted(envs.conda_envs(timeout=TAB_TIMEOUT)[0])


def _target_prefix(given: dict) -> Path | None:
    if given.get("env"):
        return Path(os.path.expanduser(given["env"]))
    if given.get("env_name"):
        from rocmbuild.environment import envs

        found = envs.conda_envs(timeout=TAB_TIMEOUT)[0]
        return found.get(given["env_name"])
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return None


def txn_ids(given: dict) -> list[str]:
    """The transaction ids in the history of the target named on the line, newest first; only
    those of a journal id's grammar (a planted line's id is not offered)."""
    from rocmbuild.swap import statedir
    from rocmbuild.swap.journal import TXN_RE

    prefix = _target_prefix(given)
    if prefix is None:
        return []
    ids: list[str] = []
    for d in statedir.state_dirs_for(prefix.resolve()):
        ids += [rec.id for rec in statedir.read_history(d) if rec.id not in ids and TXN_RE.fullmatch(rec.id)]
    return ids[::-1]
