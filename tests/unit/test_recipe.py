"""Recipe parsing, validation, search path and overrides (every bad input: exit 2, clear message)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmbuild.errors import EXIT_INPUT, InputError, RecipeError
from rocmbuild import recipe
from tests.support.recipes import fixture_recipe

GOOD = fixture_recipe(
    description="a miniature MIOpen", url="https://example.invalid/rocm-libraries.git", sparse=["shared/ctest"],
    generator="Ninja", jobs=3,
    defines={"CMAKE_PREFIX_PATH": "/opt/rocm", "MIOPEN_USE_MLIR": False, "GPU_TARGETS": ["gfx1151", "gfx1100"]},
    env={"CXX": "/opt/rocm/llvm/bin/clang++"}, programs=["cmake>=3.25", "git"],
)


def write(tmp_path: Path, text: str, name: str = "mini.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_parse_good_recipe(tmp_path):
    r = recipe.load(str(write(tmp_path, GOOD)))
    assert r.name == "mini"
    assert r.source.subdir == "projects/miopen"
    assert r.source.sparse == ("shared/ctest",)
    assert r.source.version.regex.startswith("rocm_setup_version")
    assert r.build.generator == "Ninja" and r.build.jobs == 3
    assert r.build.define("MIOPEN_USE_MLIR") is False
    assert r.build.define("GPU_TARGETS") == ("gfx1151", "gfx1100")
    assert dict(r.build.env)["CXX"] == "/opt/rocm/llvm/bin/clang++"
    assert r.build.install_prefix == "/usr/local"
    assert r.verify.library == "libMIOpen" and r.verify.encoding == "miopen"


def test_name_defaults_to_stem(tmp_path):
    r = recipe.load(str(write(tmp_path, GOOD.replace('name = "mini"\n', ""), "stemmed.toml")))
    assert r.name == "stemmed"


@pytest.mark.parametrize(
    "text, key, fragment",
    [
        (GOOD.replace("generator =", "generatr ="), "build.generatr", "did you mean 'generator'"),
        (GOOD.replace("[install]", "[instal]"), "instal", "did you mean 'install'"),
        (GOOD.replace("jobs = 3", 'jobs = "3"'), "build.jobs", "must be an integer"),
        (GOOD.replace('sparse = ["shared/ctest"]', 'sparse = "shared/ctest"'), "source.sparse", "list of strings"),
        (GOOD.replace('git = "https://example.invalid/rocm-libraries.git"',
                      'git = "x"\ntarball = "y"\nsha256 = "' + "0" * 64 + '"'), "source", "both 'git' and 'tarball'"),
        ('name = "x"\n[build]\njobs = 1\n', "source", "missing [source]"),
        (GOOD.replace('generator = "Ninja"', 'generator = "Ninj"'), "build.generator", "unknown generator"),
        (GOOD.replace("([0-9.]+)", "[0-9.]+"), "source.version.regex", "capture group"),
        (GOOD.replace('version = "source"', 'encoding = "rocm"'), "verify.encoding", "unknown encoding"),
        (GOOD.replace('MIOPEN_USE_MLIR = false', 'MIOPEN_USE_MLIR = { a = 1 }'), "build.defines.MIOPEN_USE_MLIR",
         "must be a bool"),
        (GOOD.replace('programs = ["cmake>=3.25", "git"]', 'programs = ["cmake>>3"]'), "requires.programs",
         "invalid requirement"),
        (GOOD + '\n[verify]\n', None, "TOML syntax error"),
    ],
)
def test_bad_recipes_name_file_and_key(tmp_path, text, key, fragment):
    path = write(tmp_path, text)
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(path))
    err = ei.value
    assert err.exit_code == EXIT_INPUT
    assert str(path) in err.message
    assert fragment in err.message + " " + err.hint
    if key is not None:
        assert err.details["key"] == key


def test_toml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, 'name = "x"\n[source]\ngit = "unterminated\n')
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(path))
    assert ei.value.details["line"] == 3
    assert "line 3" in ei.value.message


def test_unknown_recipe_lists_what_was_found(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    write(d, GOOD, "mini.toml")
    with pytest.raises(RecipeError) as ei:
        recipe.load("minj", [str(d)])
    assert ei.value.exit_code == EXIT_INPUT
    assert "did you mean 'mini'" in ei.value.hint
    assert str(d / "mini.toml") in ei.value.hint
    assert "miopen-develop" in ei.value.hint  # the bundled recipes are listed too


def test_search_order(tmp_path, monkeypatch):
    a, b, cfg = tmp_path / "a", tmp_path / "b", tmp_path / "xdg-config" / "rocmbuild" / "recipes"
    for d in (a, b, cfg):
        d.mkdir(parents=True)
        write(d, GOOD.replace("a miniature MIOpen", f"from {d.name}"), "mini.toml")
    monkeypatch.setenv("ROCMBUILD_RECIPES", f"{b}:{tmp_path / 'missing'}")
    assert recipe.load("mini", [str(a)]).description == "from a"
    assert recipe.load("mini").description == "from b"
    monkeypatch.delenv("ROCMBUILD_RECIPES")
    assert recipe.load("mini").description == "from recipes"  # ~/.config/rocmbuild/recipes
    assert recipe.find("miopen-develop") == recipe.bundled_dir() / "miopen-develop.toml"


def test_patch_lookup_beside_then_parent(tmp_path):
    recipes_dir = tmp_path / "recipes"
    recipes_dir.mkdir()
    text = GOOD.replace('subdir = "projects/miopen"', 'subdir = "projects/miopen"\npatches = ["0001-a.patch"]')
    path = write(recipes_dir, text)
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(path))
    assert "0001-a.patch" in ei.value.message and ei.value.details["key"] == "source.patches"
    parent = tmp_path / "patches" / "mini"
    parent.mkdir(parents=True)
    (parent / "0001-a.patch").write_text("parent")
    assert recipe.load(str(path)).patch_files == ((parent / "0001-a.patch").resolve(),)
    beside = recipes_dir / "patches" / "mini"
    beside.mkdir(parents=True)
    (beside / "0001-a.patch").write_text("beside")
    assert recipe.load(str(path)).patch_files == ((beside / "0001-a.patch").resolve(),)


def test_overrides(tmp_path):
    r = recipe.load(str(write(tmp_path, GOOD)))
    o = recipe.apply_overrides(r, recipe.Overrides(
        ref="release/rocm-rel-7.0", source="/srv/mirror", defines=("MIOPEN_USE_MLIR=ON", "X:STRING=ON", "Y=1"),
        jobs=7, gpu_targets="gfx1151", launcher="ccache"))
    assert o.source.ref == "release/rocm-rel-7.0" and o.source.git == "/srv/mirror"
    assert o.build.define("MIOPEN_USE_MLIR") is True
    assert o.build.define("X") == "ON" and o.build.define("Y") == "1"
    assert o.build.define("GPU_TARGETS") == "gfx1151"
    assert o.build.jobs == 7 and o.build.launcher == "ccache"
    assert r.build.jobs == 3  # the original is untouched (frozen)


@pytest.mark.parametrize("ov", [
    recipe.Overrides(defines=("NOEQUALS",)),
    recipe.Overrides(defines=("1BAD=x",)),
    recipe.Overrides(gpu_targets="nvidia"),
    recipe.Overrides(jobs=-1),
])
def test_bad_overrides(tmp_path, ov):
    r = recipe.load(str(write(tmp_path, GOOD)))
    with pytest.raises(InputError) as ei:
        recipe.apply_overrides(r, ov)
    assert ei.value.exit_code == EXIT_INPUT and ei.value.hint


def test_gpu_targets_auto(tmp_path):
    r = recipe.load(str(write(tmp_path, GOOD.replace('GPU_TARGETS = ["gfx1151", "gfx1100"]', 'GPU_TARGETS = "auto"'))))
    assert recipe.resolve_gpu_targets(r, lambda: ["gfx1151"]).build.define("GPU_TARGETS") == "gfx1151"
    with pytest.raises(InputError) as ei:
        recipe.resolve_gpu_targets(r, lambda: [])
    assert "--gpu-targets" in ei.value.hint
    # --gpu-targets wins over detection
    o = recipe.apply_overrides(r, recipe.Overrides(gpu_targets="gfx1100,gfx1151"))
    assert recipe.resolve_gpu_targets(o, lambda: []).build.define("GPU_TARGETS") == "gfx1100;gfx1151"


def test_canonical_ignores_description(tmp_path):
    a = recipe.load(str(write(tmp_path, GOOD)))
    b = recipe.load(str(write(tmp_path, GOOD.replace("a miniature MIOpen", "other words"), "mini2.toml")))
    assert a.canonical_json() == b.canonical_json().replace('"mini2"', '"mini"') or a.name != b.name
    assert "description" not in a.canonical()


def test_requirement_hints(tmp_path):
    text = GOOD.replace('[install]', '[requires.hints]\n"cmake>=3.25" = "pip install cmake"\n\n[install]')
    r = recipe.load(str(write(tmp_path, text)))
    assert r.requires.hint("cmake>=3.25") == "pip install cmake" and r.requires.hint("git") is None
    bad = GOOD.replace('[install]', '[requires.hints]\n"cmake" = "pip install cmake"\n\n[install]')
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(write(tmp_path, bad, "bad.toml")))
    assert ei.value.details["key"] == "requires.hints.cmake" and "cmake>=3.25" in ei.value.hint


# --------------------------------------------------------------------------------------------
# [source] contains (fixes by name) and ${ROCM_PATH}

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_contains_parses_grep_and_commit(tmp_path):
    text = fixture_recipe(source_extra=f'contains = [{{ name = "bn fix", grep = "MIO_BN_GFX115X", path = "src/kernels" }},'
                                       f' {{ name = "by commit", commit = "{SHA.upper()}" }}]')
    r = recipe.load(str(write(tmp_path, text)))
    grep, commit = r.source.contains
    assert (grep.name, grep.grep, grep.path, grep.commit) == ("bn fix", "MIO_BN_GFX115X", "src/kernels", None)
    assert (commit.name, commit.grep, commit.commit) == ("by commit", None, SHA)
    assert "contains" in r.canonical()["source"]
    plain = recipe.load(str(write(tmp_path, fixture_recipe(), "plain.toml")))
    assert "contains" not in plain.canonical()["source"]  # lock files of recipes without it keep their hash


@pytest.mark.parametrize("entry,key,words", [
    ('{ name = "a", grpe = "X" }', "source.contains[0].grpe", "did you mean 'grep'"),
    ('{ grep = "X" }', "source.contains[0].name", "needs a 'name'"),
    ('{ name = " ", grep = "X" }', "source.contains[0].name", "needs a 'name'"),
    (f'{{ name = "a", grep = "X", commit = "{SHA}" }}', "source.contains[0]", "exactly one of 'grep' and 'commit'"),
    ('{ name = "a" }', "source.contains[0]", "exactly one of 'grep' and 'commit'"),
    ('{ name = "a", commit = "abc123" }', "source.contains[0].commit", "40 hex digits"),
    (f'{{ name = "a", commit = "{SHA}", path = "src" }}', "source.contains[0].path", "applies to 'grep'"),
    ('{ name = "a", grep = "" }', "source.contains[0].grep", "is empty"),
    ('{ name = "a", grep = "X", path = "../up" }', "source.contains[0].path", "clean relative path"),
    ('{ name = "a", grep = "X", path = "/abs" }', "source.contains[0].path", "clean relative path"),
    ('{ name = "a", grep = "X", path = "src/./k" }', "source.contains[0].path", "clean relative path"),
    ('{ name = "a", grep = "X", path = "src/" }', "source.contains[0].path", "clean relative path"),
    ('{ name = "a", grep = 3 }', "source.contains[0].grep", "must be a string"),
    ('{ name = "a", grep = "X" }, { name = "a", grep = "Y" }', "source.contains[1].name", "two fixes are named"),
    ('"MIO_BN_GFX115X"', "source.contains[0]", "must be a table"),
])
def test_contains_refuses_what_it_does_not_understand(tmp_path, entry, key, words):
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(write(tmp_path, fixture_recipe(source_extra=f"contains = [{entry}]"))))
    assert ei.value.exit_code == EXIT_INPUT and ei.value.details["key"] == key
    assert words in ei.value.message + " " + ei.value.hint


def test_contains_commit_needs_a_git_source(tmp_path):
    text = fixture_recipe(tarball="https://example.invalid/x.tar.gz", sha256="0" * 64, ref=None,
                          source_extra=f'contains = [{{ name = "a", commit = "{SHA}" }}]')
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(write(tmp_path, text)))
    assert "archive source has no history" in ei.value.message


def test_rocm_path_resolved_in_defines_and_env_only(tmp_path):
    from rocmbuild.recipe.variables import Variable, resolve, resolve_recipe

    text = fixture_recipe(defines={"A": "${ROCM_PATH}/x", "B": ["$ROCM_PATH", "y"], "C": True, "D": "$ROCM_PATHS"},
                          env={"CXX": "${ROCM_PATH}/llvm/bin/clang++"}, programs=["${ROCM_PATH}/bin/hipcc"])
    values = {**resolve(), "ROCM_PATH": Variable("ROCM_PATH", "/usr", "a test")}
    r = resolve_recipe(recipe.load(str(write(tmp_path, text))), values)
    assert r.build.define("A") == "/usr/x" and r.build.define("B") == ("/usr", "y") and r.build.define("C") is True
    assert r.build.define("D") == "$ROCM_PATHS"  # another variable: untouched
    assert dict(r.build.env)["CXX"] == "/usr/llvm/bin/clang++"
    assert r.requires.programs == ("${ROCM_PATH}/bin/hipcc",)  # checked by its text (builder/requirements.py)
