"""Recipes that work on every ROCm layout: AMD's /opt/rocm and a distribution's /usr (Debian's
clang++-22, a bare half.hpp), the recipe variables doctor and the build share, requirement
alternatives and ``when``, hints per distribution (/etc/os-release) and the one install line.

Machines are faked with ``ROCMBUILD_ROOT`` (files only: no ROCm exists here); doctor, plan and
build run for real (``cli.main``), the half.hpp shim is made through the cache home's fd.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from rocmbuild.builder import hints, shims
from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT, RecipeError
from rocmbuild.flows import build as flow
from rocmbuild import recipe
from rocmbuild.recipe import variables
from rocmbuild.recipe.requires import define_on
from rocmbuild.fs.root import ConfinementError

HALF = b"// half - IEEE 754-based half-precision floating-point library (a stand-in)\n" * 40

RECIPE = """
name = "lay"
[source]
git = "file:///nonexistent-remote"
ref = "develop"
[build]
[build.defines]
CMAKE_PREFIX_PATH = "${ROCM_PATH}"
HALF_INCLUDE_DIR = "${HALF_INCLUDE_DIR}"
DEVICE_LIBS = "${ROCM_DEVICE_LIB_PATH}"
USE_X = false
[build.env]
CXX = "${HIP_CXX}"
CC = "${HIP_CC}"
[requires]
programs = ["${HIPCC}", { any = ["/nowhere/bin/xcc", "${HIP_CXX}"] }]
paths = [
  "${HIP_CMAKE_DIR}/hip-config.cmake",
  { path = "${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake", when = "USE_X" },
  { path = "${ROCM_PATH}/lib/cmake/ylib/ylib-config.cmake", when = "USE_Y" },
  { any = ["${ROCM_PATH}/include/half/half.hpp", "${ROCM_PATH}/include/half.hpp"] },
  "${ROCM_PATH}/lib/cmake/zlib/zlib-config.cmake",
  "${ROCM_PATH}/lib/cmake/wlib/wlib-config.cmake",
]
[requires.hints]
"${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake" = { rocm = "apt install xlib-dev", debian = "apt install libxlib-dev", fedora = "dnf install xlib-devel" }
"${ROCM_PATH}/lib/cmake/zlib/zlib-config.cmake" = { rocm = "apt install zlib-dev hip-dev", debian = "apt install libz-dev libamdhip64-dev", fedora = "dnf install zlib-devel", default = "install zlib" }
"${ROCM_PATH}/lib/cmake/wlib/wlib-config.cmake" = { rocm = "apt install wlib-dev hip-dev", debian = "apt install libw-dev libz-dev", fedora = "dnf install wlib-devel zlib-devel" }
[install]
libraries = ["libMIOpen"]
"""


def _file(p: Path, data: bytes = b"") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    if p.parent.name == "bin":  # a program: an executable stand-in (`--version` is never needed to pass)
        p.write_bytes(b"#!/bin/sh\necho stand-in 22.1.8\n")
        p.chmod(0o755)
    return p


def _os_release(root: Path, text: str) -> None:
    _file(root / "etc/os-release", text.encode())


def amd_machine(root: Path) -> Path:
    rocm = root / "opt/rocm"
    for rel in ("bin/hipcc", "llvm/bin/clang++", "llvm/bin/clang", "lib/cmake/hip/hip-config.cmake",
                "amdgcn/bitcode/ocml.bc"):
        _file(rocm / rel)
    _file(rocm / "include/half/half.hpp", HALF)
    _os_release(root, 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nPRETTY_NAME="Ubuntu 24.04.3 LTS"\n')
    return root


def debian_machine(root: Path, os_release: str = 'PRETTY_NAME="Debian GNU/Linux forky/sid"\nID=debian\n') -> Path:
    usr = root / "usr"
    for rel in ("bin/hipcc", "lib/llvm-22/bin/clang", "lib/llvm-19/bin/clang", "lib/x86_64-linux-gnu/cmake/hip/hip-config.cmake",
                "lib/llvm-22/lib/clang/22/amdgcn/bitcode/ocml.bc"):
        _file(usr / rel)
    os.symlink("clang", usr / "lib/llvm-22/bin/clang++")
    os.symlink("clang", usr / "lib/llvm-19/bin/clang++")
    os.symlink("../lib/llvm-22/bin/clang++", usr / "bin/clang++-22")
    os.symlink("../lib/llvm-22/bin/clang", usr / "bin/clang-22")
    _file(usr / "include/half.hpp", HALF)  # libhalf-dev: no half/ dir
    _os_release(root, os_release)
    return root


@pytest.fixture
def machine(tmp_path, monkeypatch, fake_gpu):
    fake_gpu()
    monkeypatch.delenv("ROCM_PATH", raising=False)
    for name in ("CACHE_FAIL", "TARGET_FAIL"):  # these tests are about requirements, not this disk
        monkeypatch.setattr(f"rocmbuild.doctor.{name}", 0)

    def make(kind: str, **kw) -> Path:
        root = {"amd": amd_machine, "debian": debian_machine}[kind](tmp_path / f"machine-{kind}", **kw)
        monkeypatch.setenv("ROCMBUILD_ROOT", str(root))
        return root

    return make


@pytest.fixture
def lay(tmp_path) -> Path:
    p = tmp_path / "recipes/lay.toml"
    _file(p, RECIPE.encode())
    return p


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _checks(data: dict, key: str = "checks") -> dict[str, dict]:
    return {c["name"]: c for c in data[key]}


# --------------------------------------------------------------------------------------------
# the variables, as doctor and the build resolve them


def test_variables_on_amds_layout(machine):
    root = machine("amd")
    rocm = root / "opt/rocm"
    v = {k: x.value for k, x in variables.resolve().items()}
    assert v == {"ROCM_PATH": str(rocm), "HIP_CXX": f"{rocm}/llvm/bin/clang++", "HIP_CC": f"{rocm}/llvm/bin/clang",
                 "HIPCC": f"{rocm}/bin/hipcc", "ROCM_DEVICE_LIB_PATH": f"{rocm}/amdgcn/bitcode",
                 "HIP_CMAKE_DIR": f"{rocm}/lib/cmake/hip", "HALF_INCLUDE_DIR": f"{rocm}/include"}


def test_variables_on_debians_layout(machine):
    root = machine("debian")
    usr = root / "usr"
    values = variables.resolve()
    v = {k: x.value for k, x in values.items()}
    sha = hashlib.sha256(HALF).hexdigest()[:16]
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert v == {"ROCM_PATH": str(usr), "HIP_CXX": f"{usr}/bin/clang++-22", "HIP_CC": f"{usr}/bin/clang-22",
                 "HIPCC": f"{usr}/bin/hipcc", "ROCM_DEVICE_LIB_PATH": f"{usr}/lib/llvm-22/lib/clang/22/amdgcn/bitcode",
                 "HIP_CMAKE_DIR": f"{usr}/lib/x86_64-linux-gnu/cmake/hip",
                 "HALF_INCLUDE_DIR": f"{home}/include/half-{sha}"}
    assert values["HALF_INCLUDE_DIR"].source == usr / "include/half.hpp"
    assert not (home / "include").exists()  # resolving changes nothing: the build makes it


def test_doctor_shows_every_variable_and_passes_on_debian(machine, lay, capsys, monkeypatch):
    machine("debian")
    code, data = _run(capsys, "doctor", str(lay))
    c = _checks(data)
    for name in variables.NAMES:
        assert c[f"variable ${{{name}}}"]["status"] == "ok", c[f"variable ${{{name}}}"]
    assert c["variable ${HIP_CXX}"]["detail"].startswith(f"{os.environ['ROCMBUILD_ROOT']}/usr/bin/clang++-22 (")
    # alternatives: the one found is named; the conditional ones are skipped with the reason
    assert c["requires /nowhere/bin/xcc or ${HIP_CXX}"]["status"] == "ok"
    assert "clang++-22" in c["requires /nowhere/bin/xcc or ${HIP_CXX}"]["detail"]
    assert c["requires path ${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake"] == {
        "name": "requires path ${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake", "status": "ok",
        "detail": "not needed: USE_X is OFF", "fix": ""}
    assert c["requires path ${ROCM_PATH}/lib/cmake/ylib/ylib-config.cmake"]["detail"] == "not needed: USE_Y is not set"
    half = c["requires path ${ROCM_PATH}/include/half/half.hpp or ${ROCM_PATH}/include/half.hpp"]
    assert half["status"] == "ok" and half["detail"].endswith("/usr/include/half.hpp")
    # the two lib configs are missing here: Debian's names, merged into one line, packages once
    assert data["failed"] == ["requires path ${ROCM_PATH}/lib/cmake/zlib/zlib-config.cmake",
                              "requires path ${ROCM_PATH}/lib/cmake/wlib/wlib-config.cmake"]
    assert data["install"] == "apt install libz-dev libamdhip64-dev libw-dev"
    code = cli.main(["doctor", str(lay)])
    text = capsys.readouterr().out
    assert code == EXIT_INPUT and text.rstrip().endswith("2 failed\ninstall what is missing: apt install libz-dev "
                                                         "libamdhip64-dev libw-dev")


def test_plan_and_quiet_doctor_end_with_the_install_line(machine, lay, capsys):
    machine("debian")
    assert cli.main(["plan", str(lay), "--offline"]) == 0
    text = capsys.readouterr().out
    assert "  install  apt install libz-dev libamdhip64-dev libw-dev" in text
    assert "  skipped  requires path ${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake: not needed: USE_X is OFF" in text
    assert cli.main(["-q", "doctor", str(lay)]) == EXIT_INPUT
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "install what is missing: apt install libz-dev libamdhip64-dev libw-dev"
    assert [x.split(":")[0] for x in lines[:-1]] == [
        "[fail] requires path ${ROCM_PATH}/lib/cmake/zlib/zlib-config.cmake",
        "[fail] requires path ${ROCM_PATH}/lib/cmake/wlib/wlib-config.cmake"]


def test_a_define_turned_on_brings_its_requirement_back(machine, lay, capsys):
    machine("debian")
    _code, data = _run(capsys, "doctor", str(lay), "-D", "USE_X=ON", "-D", "USE_Y=1")
    c = _checks(data)
    assert c["requires path ${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake"]["status"] == "fail"
    assert c["requires path ${ROCM_PATH}/lib/cmake/xlib/xlib-config.cmake"]["fix"] == "apt install libxlib-dev"
    assert c["requires path ${ROCM_PATH}/lib/cmake/ylib/ylib-config.cmake"]["status"] == "fail"
    assert data["install"].startswith("apt install libxlib-dev ")
    code, data = _run(capsys, "doctor", "-D", "USE_X=ON")  # no recipe: the override would do nothing
    assert code == EXIT_INPUT and "need a recipe" in data["error"]["message"]


@pytest.mark.parametrize("value,on", [(True, True), (False, False), ("ON", True), ("yes", True), ("Y", True),
                                      ("1", True), ("2.5", True), ("0", False), ("OFF", False), ("", False),
                                      ("NOTFOUND", False), (0, False), (3, True), (("a", "b"), False)])
def test_when_follows_cmake_truthiness(value, on):
    assert define_on(value) is on


def test_hints_follow_the_distribution_found(machine, lay, capsys):
    machine("amd")  # AMD's layout: AMD's repository's names, whatever the distribution
    _code, data = _run(capsys, "doctor", str(lay))
    assert data["install"] == "apt install zlib-dev hip-dev wlib-dev"


def test_a_fedora_like_machine_gets_dnf(machine, lay, capsys):
    machine("debian", os_release='ID="rocky"\nID_LIKE="rhel centos fedora"\n')  # ID_LIKE's fedora matches
    _code, data = _run(capsys, "doctor", str(lay))
    assert data["install"] == "dnf install zlib-devel wlib-devel"


def test_an_unknown_distribution_gets_the_default(machine, lay, capsys):
    machine("debian", os_release="ID=plan9\n")
    _code, data = _run(capsys, "doctor", str(lay))
    c = _checks(data)
    assert c["requires path ${ROCM_PATH}/lib/cmake/zlib/zlib-config.cmake"]["fix"] == "install zlib"
    # no table entry and no default: the generic fix names the file
    assert c["requires path ${ROCM_PATH}/lib/cmake/wlib/wlib-config.cmake"]["fix"].startswith("install what provides ")
    assert data["install"] is None


@pytest.mark.parametrize("os_release,fix", [
    ("ID=ubuntu\nID_LIKE=debian\n", "apt install hipcc libamdhip64-dev"),
    ("ID=fedora\n", "install the ROCm development packages under "),
])
def test_doctors_own_rocm_fix_names_the_distributions_packages(machine, capsys, os_release, fix):
    root = machine("debian", os_release=os_release)
    (root / "usr/bin/hipcc").unlink()
    _code, data = _run(capsys, "doctor")
    assert _checks(data)["hipcc"]["status"] == "fail" and _checks(data)["hipcc"]["fix"].startswith(fix)


def test_os_release_parsing(tmp_path):
    _os_release(tmp_path, '# comment\nID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"\nBROKEN\nX=\'unterminated\n')
    osr = hints.os_release(tmp_path)
    assert osr.ids == ("opensuse-tumbleweed", "opensuse", "suse")
    assert hints.os_release(tmp_path / "nowhere").ids == ()
    table = (("default", "d"), ("suse", "zypper install s"))
    assert hints.pick(table, amd_layout=False, osr=osr) == "zypper install s"
    assert hints.pick((("rocm", "r"), *table), amd_layout=True, osr=osr) == "r"


def test_merge_keeps_order_and_names_each_package_once():
    line, other = hints.merge(["apt install rocm-llvm", "apt install hipcc hip-dev", "apt install hip-dev",
                               "pip install 'cmake>=3.25'", "apt install hip-dev; apt install rocblas-dev",
                               "sudo apt-get -y install a", "sudo apt-get -y install b a",
                               "install ROCm (https://rocm.docs.amd.com)", "install ROCm (https://rocm.docs.amd.com)",
                               "apt install x; rm -rf /"])
    assert line == ("apt install rocm-llvm hipcc hip-dev rocblas-dev && pip install 'cmake>=3.25' && "
                    "sudo apt-get -y install a b")
    assert other == ["install ROCm (https://rocm.docs.amd.com)", "apt install x; rm -rf /"]
    assert hints.summary(["apt install a", "apt install a b", "read the docs"]) == "apt install a b; read the docs"


# --------------------------------------------------------------------------------------------
# plan and build: resolved values reach cmake, unresolvable ones never do


def test_plan_on_debian_gives_cmake_the_resolved_values(machine, lay, capsys):
    root = machine("debian")
    home = Path(os.environ["ROCMBUILD_HOME"])
    _code, plan = _run(capsys, "plan", str(lay), "--offline")
    shim = variables.resolve()["HALF_INCLUDE_DIR"].value
    assert plan["env"] == {"CC": f"{root}/usr/bin/clang-22", "CXX": f"{root}/usr/bin/clang++-22"}
    configure = plan["commands"]["configure"]
    assert f"-DHALF_INCLUDE_DIR:STRING={shim}" in configure
    assert f"-DDEVICE_LIBS:STRING={root}/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode" in configure
    # the key hashes the home-made dir as ${ROCMBUILD_HOME}/...: another home, the same key
    defines = dict(plan["cache"]["inputs"]["defines"])
    assert defines["HALF_INCLUDE_DIR"] == "${ROCMBUILD_HOME}/" + str(Path(shim).relative_to(home))
    assert not (home / "include").exists()  # plan changes nothing


def test_an_unresolvable_variable_refuses_the_build_naming_it(machine, lay, capsys):
    root = machine("debian")
    for p in (root / "usr/bin/clang++-22", root / "usr/bin/clang-22", root / "usr/lib/llvm-22/bin/clang++",
              root / "usr/lib/llvm-19/bin/clang++"):
        p.unlink()
    code, data = _run(capsys, "build", str(lay), "--gpu-targets", "gfx1151")
    err = data["error"]
    assert code == EXIT_INPUT and "needs what this machine does not have" in err["message"]
    assert "variable ${HIP_CXX}: not resolvable here" in err["message"]
    # Debian's packages, in one line to paste: each package once (hipcc is the fix of three checks)
    assert err["hint"] == "apt install hipcc libz-dev libamdhip64-dev libw-dev"
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert not (home / "src").exists() and not (home / "include").exists()  # refused before any fetch


# --------------------------------------------------------------------------------------------
# the half.hpp shim


def test_the_shim_holds_a_copy_and_is_made_once(machine, lay):
    root = machine("debian")
    home = Path(os.environ["ROCMBUILD_HOME"])
    r = flow.load_recipe(str(lay), resolve_auto=False)
    made = shims.make(r, home)
    assert made is not None and made.parent == home / "include"
    hpp = made / "half/half.hpp"
    assert hpp.read_bytes() == HALF and not hpp.is_symlink() and (hpp.stat().st_mode & 0o777) == 0o644
    ino = hpp.stat().st_ino
    assert shims.make(r, home) == made and hpp.stat().st_ino == ino  # the same bytes: kept
    hpp.write_bytes(b"tampered")
    shims.make(r, home)
    assert hpp.read_bytes() == HALF
    # the header changed: another dir (another key), the old one left as it is
    (root / "usr/include/half.hpp").write_bytes(HALF + b"// 2.2\n")
    r2 = flow.load_recipe(str(lay), resolve_auto=False)
    assert shims.make(r2, home) != made and hpp.read_bytes() == HALF


def test_a_recipe_on_amds_layout_needs_no_shim(machine, lay):
    machine("amd")
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert shims.make(flow.load_recipe(str(lay), resolve_auto=False), home) is None
    assert not (home / "include").exists()


@pytest.mark.parametrize("where", ["include", "include/half-SHA", "include/half-SHA/half"])
def test_a_symlink_planted_where_the_shim_goes_is_refused(machine, lay, tmp_path, where):
    machine("debian")
    home = Path(os.environ["ROCMBUILD_HOME"])
    canary = tmp_path / "canary"
    _file(canary / "keep", b"canary")
    before = sorted((p.relative_to(canary), p.read_bytes()) for p in canary.rglob("*") if p.is_file())
    r = flow.load_recipe(str(lay), resolve_auto=False)
    sha = Path(variables.resolve()["HALF_INCLUDE_DIR"].value).name.split("-", 1)[1]
    link = home / where.replace("SHA", sha)
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(canary, link)
    with pytest.raises(ConfinementError) as ei:
        shims.make(r, home)
    assert ei.value.exit_code == EXIT_INPUT and "symlink" in ei.value.message
    assert sorted((p.relative_to(canary), p.read_bytes()) for p in canary.rglob("*") if p.is_file()) == before
    assert link.is_symlink()


# --------------------------------------------------------------------------------------------
# strict parsing of the new tables


BAD = [
    ('programs = [{ any = ["a"], wen = "X" }]', "requires.programs[0].wen", "did you mean 'when'?"),
    ('paths = [{ pth = "a" }]', "requires.paths[0].pth", "did you mean 'path'?"),
    ('paths = [{ program = "a" }]', "requires.paths[0].program", "known keys"),
    ('paths = [{ path = "a", any = ["b"] }]', "requires.paths[0]", "exactly one"),
    ('paths = [{ when = "X" }]', "requires.paths[0]", "exactly one"),
    ('paths = [{ any = [] }]', "requires.paths[0].any", "non-empty list"),
    ('paths = [{ any = "a" }]', "requires.paths[0].any", "non-empty list"),
    ('paths = [{ any = ["a", 3] }]', "requires.paths[0].any", "non-empty list"),
    ('paths = [{ path = 3 }]', "requires.paths[0].path", "non-empty string"),
    ('paths = [{ path = "a", when = true }]', "requires.paths[0].when", "must name a define"),
    ('paths = [{ path = "a", when = "NOT A NAME" }]', "requires.paths[0].when", "must name a define"),
    ("paths = [3]", "requires.paths[0]", "must be a string, or a table"),
    ('paths = ["a", ""]', "requires.paths[1]", "is empty"),
    ('paths = "a"', "requires.paths", "must be a list"),
    ('programs = [{ any = ["cmake>=x.y"] }]', "requires.programs", "invalid requirement"),
    ('paths = ["a"]\nhints = { a = { debain = "apt install a" } }', "requires.hints.a.debain", "did you mean 'debian'?"),
    ('paths = ["a"]\nhints = { a = { "Debian!" = "apt install a" } }', "requires.hints.a.Debian!", "os-release ID"),
    ('paths = ["a"]\nhints = { a = { debian = 3 } }', "requires.hints.a.debian", "non-empty string"),
    ('paths = ["a"]\nhints = { a = {} }', "requires.hints.a", "string or a table"),
    ('paths = ["a"]\nhints = { a = 3 }', "requires.hints.a", "string or a table"),
    ('paths = ["a"]\nhints = { b = "apt install b" }', "requires.hints.b", "not in requires.programs or paths"),
    ('pahts = ["a"]', "requires.pahts", "did you mean 'paths'?"),
    ('hints = 3', "requires.hints", "must be a table"),
]


@pytest.mark.parametrize("body,key,words", BAD)
def test_hostile_requirement_tables_are_refused_naming_the_key(tmp_path, body, key, words):
    p = _file(tmp_path / "bad.toml", f'name = "bad"\n[source]\ngit = "file:///x"\n[requires]\n{body}\n'.encode())
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(p))
    e = ei.value
    assert e.exit_code == EXIT_INPUT and e.details["key"] == key, (e.message, e.details)
    assert words in e.message + " " + e.hint


def test_requires_as_a_non_table_is_refused(tmp_path):
    p = _file(tmp_path / "bad.toml", b'name = "bad"\nrequires = 3\n[source]\ngit = "file:///x"\n')
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(p))
    assert ei.value.details["key"] == "requires"


def test_a_hint_keyed_by_an_alternative_and_plain_strings_keep_their_lock_hash(tmp_path):
    p = _file(tmp_path / "ok.toml", b'name = "ok"\n[source]\ngit = "file:///x"\n[requires]\n'
              b'paths = ["p", { any = ["a", "b"], when = "W" }]\nhints = { b = { default = "get b" } }\n')
    r = recipe.load(str(p))
    assert r.requires.paths[0] == "p" and r.requires.hint(r.requires.paths[1]) == (("default", "get b"),)
    assert json.loads(r.canonical_json())["requires"] == {
        "programs": [], "paths": ["p", {"any": ["a", "b"], "when": "W"}], "hints": [["b", [["default", "get b"]]]]}


# --------------------------------------------------------------------------------------------
# a real build (the fixture project, real cmake) on Debian's layout


def test_a_build_on_debians_layout_gets_the_shim_and_a_key_any_home_shares(machine, tmp_path, monorepo, capsys,
                                                                         monkeypatch):
    from tests.support.recipes import write_fixture_recipe

    machine("debian")
    r = write_fixture_recipe(tmp_path / "recipes", url=monorepo.url, ref="develop", generator="Ninja",
                             defines={"MIOPEN_FIXTURE_PAD_MB": 0, "HALF_INCLUDE_DIR": "${HALF_INCLUDE_DIR}"})
    code, data = _run(capsys, "build", str(r))
    assert code == 0, data
    home = Path(os.environ["ROCMBUILD_HOME"])
    shim = Path(variables.resolve()["HALF_INCLUDE_DIR"].value)
    assert (shim / "half/half.hpp").read_bytes() == HALF and shim.parent == home / "include"
    log = Path(data["log"]).read_text()
    assert f"-DHALF_INCLUDE_DIR:STRING={shim}" in log and "${HALF" not in log  # cmake got the made dir
    manifest = json.loads((Path(data["artifact"]) / "manifest.json").read_text())
    assert ["HALF_INCLUDE_DIR", f"${{ROCMBUILD_HOME}}/include/{shim.name}"] in manifest["inputs"]["defines"]
    # another home (another user, another machine with the same header): the same key, nothing made there
    other = tmp_path / "other-home"
    monkeypatch.setenv("ROCMBUILD_HOME", str(other))
    code, plan = _run(capsys, "plan", str(r))
    assert code == 0 and plan["cache"]["key"] == data["key"]
    assert not (other / "include").exists()
