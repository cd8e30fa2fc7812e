"""Issue 27: what README.md and docs/*.md cite exists today: every repository path they name, every
relative link, every verb and option of a ``rocmbuild`` command they show, every recipe such a
command names. (The README's own command lines run in tests/integration/test_readme_commands.py.)

Decisions:
* A path is cited when it starts with one of the repository's top-level dirs (``rocmbuild/``,
  ``tests/``, ``docs/``, ...): it must be a tracked file or a dir holding one. Paths of other
  projects (``torch/_rocm_init.py``, or named after the project: ``ROCm/TheRock `docs/...```)
  and placeholders (``<key>``) are not checked.
* A command is ``rocmbuild [global options] VERB [SUBVERB] ...`` inside backticks or on a ``$ ``
  line; its options are looked up in the real argument parser (``cli.app.build_parser``), so an
  option renamed in the code fails here until the docs follow. A recipe named after the verb is a
  bundled recipe, a ``.toml`` path, or a recipe shipped elsewhere in the repository
  (``examples/``, the demo's), found by its ``name = "..."``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from rocmbuild.cli.app import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "ansible" / "README.md"]
TOP = ("rocmbuild/", "tests/", "docs/", "benchmarks/", "examples/", "recipes/", "patches/", ".ci/")
PATH = re.compile(r"(?<![\w/.~$-])((?:" + "|".join(re.escape(t) for t in TOP) + r")[\w./-]*\w)")
#: a path of another project, named before it: "(ROCm/TheRock `docs/packaging/...`)"
OTHER_PROJECT = re.compile(r"\b[A-Za-z][\w-]*/[\w.-]+ `$")
COMMAND = re.compile(r"(?:`|^\$ (?:[A-Z_]+=\S+ )*)rocmbuild((?: +-[\w-]+(?: [a-z][\w-]*(?= +[a-z]))?)*) +([a-z]+)\b([^`\n|&;#)]*)")
TAKES_RECIPE = {"show", "plan", "build", "doctor", "apply", "lock", "export", "push", "log"}


def tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    return set(out) | {str(p) for f in out for p in Path(f).parents if str(p) != "."}


def lines():
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            yield doc.relative_to(REPO), n, line


def test_every_cited_repository_path_exists():
    have = tracked()
    missing = [f"{doc}:{n}: {m.group(1)}" for doc, n, line in lines() for m in PATH.finditer(line)
               if m.group(1).rstrip(".") not in have and "<" not in line[m.start():m.end() + 1]
               and not OTHER_PROJECT.search(line[:m.start()])]
    assert not missing, "\n".join(missing)


def test_every_relative_link_resolves():
    bad = [f"{doc}:{n}: {m.group(1)}" for doc, n, line in lines()
           for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line)
           if not m.group(1).startswith(("http://", "https://")) and not (REPO / doc).parent.joinpath(m.group(1)).exists()]
    assert not bad, "\n".join(bad)


def _verbs() -> tuple[dict[str, argparse.ArgumentParser], set[str]]:
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices), {o for a in parser._actions for o in a.option_strings}


def _options(p: argparse.ArgumentParser) -> set[str]:
    out = {o for a in p._actions for o in a.option_strings}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for child in a.choices.values():
                out |= _options(child)
    return out


def _recipe_names() -> set[str]:
    names = {p.stem for p in (REPO / "recipes").glob("*.toml")}
    for p in [*(REPO / "examples").rglob("*.toml"), *(REPO / "rocmbuild").rglob("*.toml")]:
        try:
            names.add(tomllib.loads(p.read_text()).get("name", ""))
        except tomllib.TOMLDecodeError:
            pass
    return names


def test_every_cited_command_has_its_verb_options_and_recipe():
    verbs, global_options = _verbs()
    recipes = _recipe_names()
    bad: list[str] = []
    seen = 0
    for doc, n, line in lines():
        for m in COMMAND.finditer(line):
            pre, verb, rest = m.groups()
            if verb not in verbs:
                continue  # prose ("rocmbuild builds ..."), not a command
            seen += 1
            known = global_options | _options(verbs[verb])
            for opt in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", pre + " " + rest):
                if opt not in known and opt != "--bogus":  # json.md's example of an unknown option
                    bad.append(f"{doc}:{n}: rocmbuild {verb}: no option {opt}")
            words = [w for w in rest.split() if not w.startswith("-")]
            if verb in TAKES_RECIPE and words and re.fullmatch(r"[a-z][\w.-]*\d[\w.-]*", words[0]) \
                    and not words[0].endswith((".toml", ".gz", ".lock")) and words[0] not in recipes:
                bad.append(f"{doc}:{n}: rocmbuild {verb}: no recipe {words[0]!r}")
    assert seen > 100, seen  # the pattern still finds the commands
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_fenced_blocks_are_closed(doc):
    assert doc.read_text().count("\n```") % 2 == 0
