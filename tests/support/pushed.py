"""A pinned recipe built by a builder home and pushed, signed, into a ``file://`` cache; the test's
own config trusts the builder's key (for the substitution tests that need a real entry)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe


@dataclass(frozen=True)
class Pushed:
    recipe: Path
    key: str
    cache: Path  # the directory of the file:// cache
    builder: dict  # the builder's environment (its ROCMBUILD_HOME)


def build_signed_mini(tmp_path: Path, monorepo) -> tuple[Path, Path, str, dict, dict]:
    """The pinned fixture recipe built by a builder home, and a signing key: (recipe, the secret
    key's file, the public key, the builder's environment, the build's JSON)."""
    recipe = write_fixture_recipe(tmp_path / "recipes", "mini", url=monorepo.url, ref=monorepo.c_release, jobs=2)
    secret = tmp_path / "keys" / "lab-1.secret"
    secret.parent.mkdir()
    public = json.loads(rb("key", "generate", "lab-1", "--out", str(secret), "--json").stdout)["public_key"]
    builder = {"ROCMBUILD_HOME": str(tmp_path / "home-builder")}
    built = json.loads(rb("build", str(recipe), "--no-cache", "--json", env=builder).stdout)
    assert built["ok"], built
    return recipe, secret, public, builder, built


def push_mini(tmp_path: Path, monorepo) -> Pushed:
    recipe, secret, public, builder, built = build_signed_mini(tmp_path, monorepo)
    cache = tmp_path / "cache"
    r = rb("push", built["key"][:16], "--to", f"file://{cache}", "--sign-key", str(secret), "--json", env=builder)
    assert r.returncode == 0, r.stderr
    from rocmbuild import config

    config.user_file().parent.mkdir(parents=True, exist_ok=True)
    config.user_file().write_text(f'[trust]\npublic_keys = ["{public}"]\n')
    return Pushed(recipe, built["key"], cache, builder)
