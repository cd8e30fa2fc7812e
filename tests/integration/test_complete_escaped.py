"""Tab completion offers only words a user could have typed (issue 26, class 9): the hidden verb
``__complete`` (one candidate per line) never passes a control character through (a recipe file
named ``evil\\n--inject.toml`` became two candidates, ``evil`` and ``--inject``; a planted history
id holding an escape sequence was offered raw, to be echoed into the user's terminal), and offers
no candidate starting with ``-`` unless the word typed does (an env or recipe named ``-rf`` must
not become an option on the line).

Real ``python -m rocmbuild __complete`` processes, as the shell scripts run them.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import rb

RECIPE = '[recipe]\nname = "x"\n'


def _complete(*words: str, env: dict) -> tuple[str, list[str]]:
    r = rb("__complete", *words, env=env, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    mode, *found = r.stdout.split("\n")[:-1]
    return mode, found


def _world(tmp_path: Path) -> tuple[dict, Path]:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for name in ("mini", "evil\n--inject", "-rf", "esc\x1b]0;PWN\x07", "tab\tname", "ok-2"):
        (recipes / f"{name}.toml").write_text(RECIPE)
    prefix = tmp_path / "env"
    hist = prefix / ".rocmbuild"
    hist.mkdir(parents=True)
    lines = [{"id": "0001-20261206T000000Z", "verb": "apply"}, {"id": "0002\x1b]0;PWN\x07", "verb": "apply"},
             {"id": "--undo", "verb": "apply"}, {"id": "0003\n--force", "verb": "apply"}]
    (hist / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return {"ROCMBUILD_RECIPES": str(recipes)}, prefix


def _clean(found: list[str]) -> None:
    for w in found:
        assert w.isprintable() and "\x1b" not in w and "\x07" not in w, repr(w)


def test_recipe_candidates_are_only_names_that_could_be_typed(tmp_path):
    env, _ = _world(tmp_path)
    mode, found = _complete("plan", "", env=env)
    _clean(found)
    assert "mini" in found and "ok-2" in found
    assert "--inject" not in found and "evil" not in found  # one hostile file name, no injected option
    assert not [w for w in found if w.startswith("-")]
    assert not [w for w in found if "PWN" in w or "tab" in w]
    mode, found = _complete("plan", "e", env=env)
    assert found == [] or all(w.startswith("e") and w.isprintable() for w in found)
    _clean(_complete("plan", "-", env=env)[1])  # the word typed starts with -: options, still clean


def test_history_ids_are_offered_only_when_clean(tmp_path):
    env, prefix = _world(tmp_path)
    for words in (("rollback", "--env", str(prefix), "--to", ""), ("rollback", "--env", str(prefix), "--undo", "")):
        mode, found = _complete(*words, env=env)
        _clean(found)
        assert found == ["0001-20261206T000000Z"], found  # the planted ids are not offered at all
    mode, found = _complete("rollback", "--env", str(prefix), "--to", "-", env=env)
    assert found == []  # typed "-": still only ids a journal may have (an id never starts with -)
