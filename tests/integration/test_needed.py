"""The DT_NEEDED check before any swap, with real ELF libraries compiled here from C: stand-ins of
``libamdhip64.so.6`` and ``libamdhip64.so.7`` (their real SONAMEs), a libMIOpen linked against
one or the other, a venv whose fake torch really loads the ROCm 6 pair (``/proc/self/maps`` of
the probe shows it), and prebuilt .tar.gz artifacts of the new library."""

from __future__ import annotations

import hashlib
import os
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT
from rocmbuild.environment import needed
from rocmbuild.environment.probe import ProbeReport
from tests.support.envs import make_env
from tests.support.snapshots import canaries, snapshot

HIP = "int hipRuntimeGetVersion(int* v) { *v = %d; return 0; }\n"
MIOPEN = """
#include <stddef.h>
int hipRuntimeGetVersion(int* v);
%s
int miopenGetVersion(size_t* major, size_t* minor, size_t* patch)
{
    int hip = 0;
    hipRuntimeGetVersion(&hip);  /* a real use: the link keeps DT_NEEDED (also with --as-needed) */
    %s
    *major = %d; *minor = %d; *patch = %d;
    return hip > 0 ? 0 : 1;
}
"""


def cc_shared(out: Path, soname: str, source: str, *links: Path, rpath: str = "$ORIGIN") -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f"{out.name}.c"
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), f"-Wl,-soname,{soname}", f"-Wl,-rpath,{rpath}",
                    "-Wl,--enable-new-dtags", str(src), *map(str, links)], check=True, capture_output=True)
    src.unlink()
    return out


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    """hip6/hip7 stand-ins, and libMIOpen.so.1.0 builds each in its own dir (with their links)."""
    root = tmp_path_factory.mktemp("elf")
    out = {"hip6": cc_shared(root / "hip6" / "libamdhip64.so.6", "libamdhip64.so.6", HIP % 60443483),
           "hip7": cc_shared(root / "hip7" / "libamdhip64.so.7", "libamdhip64.so.7", HIP % 70226015),
           "nowhere": cc_shared(root / "nowhere" / "libnowhere.so.1", "libnowhere.so.1", "int nowhere(void){return 1;}\n"),
           "extra": cc_shared(root / "extra" / "libextra.so.1", "libextra.so.1", "int extra(void){return 1;}\n")}

    def miopen(name: str, version: tuple[int, int, int], *deps: Path, uses: str = "", rpath: str = "$ORIGIN") -> None:
        decl = "".join(f"int {u}(void);\n" for u in uses.split()) if uses else ""
        call = "".join(f"{u}();\n" for u in uses.split()) if uses else ""
        d = root / name
        cc_shared(d / "libMIOpen.so.1.0", "libMIOpen.so.1", MIOPEN % (decl, call, *version), *deps, rpath=rpath)
        (d / "libMIOpen.so.1").symlink_to("libMIOpen.so.1.0")
        (d / "libMIOpen.so").symlink_to("libMIOpen.so.1")
        out[name] = d

    miopen("old-rocm6", (3, 5, 0), out["hip6"])
    miopen("new-rocm7", (3, 5, 1), out["hip7"])
    miopen("new-rocm6", (3, 5, 1), out["hip6"])
    miopen("new-nowhere", (3, 5, 1), out["hip6"], out["nowhere"], uses="nowhere")
    miopen("new-extra", (3, 5, 1), out["hip6"], out["extra"], uses="extra", rpath="$ORIGIN:$ORIGIN/extra")
    return out


@pytest.fixture
def rocm6_env(libs, tmp_path):
    """A venv whose fake torch loads env/lib/libMIOpen.so.1 (3.5.0), which loads libamdhip64.so.6 beside it."""
    env = make_env(tmp_path / "env-rocm6", lib_dir=libs["old-rocm6"], compile_version="3.5.1", hip="6.4.43483")
    shutil.copy2(libs["hip6"], env.prefix / "lib" / "libamdhip64.so.6")
    return env


def prebuilt(tmp_path: Path, name: str, lib_dir: Path) -> Path:
    """A prebuilt recipe of ``pkg/lib/`` (the library and its links) in a .tar.gz."""
    tgz = tmp_path / f"{name}.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        for p in sorted(lib_dir.iterdir()):
            tf.add(p, arcname=f"pkg/lib/{p.name}")
    sha = hashlib.sha256(tgz.read_bytes()).hexdigest()
    recipe = tmp_path / "recipes" / f"{name}.toml"
    recipe.parent.mkdir(exist_ok=True)
    recipe.write_text(f'name = "{name}"\n[source]\narchive = "{tgz}"\nsha256 = "{sha}"\n[build]\nsystem = "prebuilt"\n'
                      '[install]\nlibraries = ["libMIOpen"]\n[verify]\nversion = "3.5.1"\n')
    return recipe


def run_json(capsys, *argv: str) -> tuple[int, dict, str]:
    code = cli.main([*argv, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def test_a_rocm7_library_into_a_rocm6_torch_is_refused_before_any_swap(tmp_path, libs, rocm6_env, capsys):
    recipe = prebuilt(tmp_path, "miopen-rocm7", libs["new-rocm7"])
    canary = canaries(tmp_path / "outside")
    before = snapshot(rocm6_env.prefix)
    code, data, _ = run_json(capsys, "apply", str(recipe), "--env", str(rocm6_env.prefix))
    assert code == EXIT_INPUT and not data["ok"], data
    err = data["error"]
    assert (f"the new libMIOpen.so.1.0 needs libamdhip64.so.7, but torch in {rocm6_env.prefix} loads "
            f"libamdhip64.so.6 (ROCm 6) from {rocm6_env.prefix / 'lib' / 'libamdhip64.so.6'}") in err["message"]
    assert "nothing was changed" in err["message"]
    assert "a build for ROCm 6" in err["hint"] and "a torch built for ROCm 7" in err["hint"]
    (conflict,) = err["details"]["needed"]["conflicts"]
    assert conflict == {"library": "lib/libMIOpen.so.1.0", "needed": "libamdhip64.so.7", "mapped": "libamdhip64.so.6",
                        "mapped_path": str(rocm6_env.prefix / "lib" / "libamdhip64.so.6")}
    assert snapshot(rocm6_env.prefix) == before  # byte for byte, inode for inode: not even a state dir
    assert all(p.read_bytes() == b for p, b in canary.items())
    # the dry run says the same, with the same exit code
    code, dry, _ = run_json(capsys, "apply", str(recipe), "--env", str(rocm6_env.prefix), "--dry-run")
    assert code == EXIT_INPUT and "needs libamdhip64.so.7" in dry["error"]["message"]
    assert snapshot(rocm6_env.prefix) == before


def test_a_library_for_the_same_rocm_is_applied_and_verified(tmp_path, libs, rocm6_env, capsys):
    code, data, err = run_json(capsys, "apply", str(prebuilt(tmp_path, "miopen-rocm6", libs["new-rocm6"])),
                               "--env", str(rocm6_env.prefix))
    assert code == 0, data
    assert data["verdict"]["ok"] and "needs" not in err
    assert (rocm6_env.prefix / "lib" / "libMIOpen.so.1.0").read_bytes() == (libs["new-rocm6"] / "libMIOpen.so.1.0").read_bytes()


def test_a_needed_library_found_nowhere_is_a_warning_and_the_verification_decides(tmp_path, libs, rocm6_env, capsys):
    recipe = prebuilt(tmp_path, "miopen-nowhere", libs["new-nowhere"])
    assert run_json(capsys, "build", str(recipe))[0] == 0  # a dry run plans only what is built
    code, data, err = run_json(capsys, "apply", str(recipe), "--env", str(rocm6_env.prefix), "--dry-run")
    assert code == 0 and data["target_plan"] is not None, data
    assert "the new libMIOpen.so.1.0 needs libnowhere.so.1" in err and "verification after the swap" in err
    # the real apply: warned, swapped, the library does not load under torch: rolled back (exit 4)
    before = snapshot(rocm6_env.prefix / "lib")
    code, data, err = run_json(capsys, "apply", str(recipe), "--env", str(rocm6_env.prefix))
    assert code == 4 and "needs libnowhere.so.1" in err, data
    assert snapshot(rocm6_env.prefix / "lib") == before


def test_runpath_origin_is_where_the_library_lands(tmp_path, libs, rocm6_env, capsys):
    (rocm6_env.prefix / "lib" / "extra").mkdir()
    shutil.copy2(libs["extra"], rocm6_env.prefix / "lib" / "extra" / "libextra.so.1")
    recipe = prebuilt(tmp_path, "miopen-extra", libs["new-extra"])
    assert run_json(capsys, "build", str(recipe))[0] == 0
    code, data, err = run_json(capsys, "apply", str(recipe), "--env", str(rocm6_env.prefix), "--dry-run")
    assert code == 0 and data["target_plan"] is not None, data
    assert "libextra.so.1" not in err  # found through $ORIGIN/extra of the target's lib dir
    (rocm6_env.prefix / "lib" / "extra" / "libextra.so.1").unlink()
    code, data, err = run_json(capsys, "apply", str(recipe), "--env", str(rocm6_env.prefix), "--dry-run")
    assert code == 0 and "needs libextra.so.1" in err  # the control: gone, it is warned about


def test_the_check_reads_dt_needed_and_the_mapped_sonames(tmp_path, libs):
    elf = needed.read_elf(libs["new-rocm7"] / "libMIOpen.so.1.0")
    assert elf is not None and "libamdhip64.so.7" in elf.needed and elf.runpath == ("$ORIGIN",)
    assert needed.read_elf(tmp_path) is None  # a directory is no ELF file
    (tmp_path / "not-elf.so").write_bytes(b"#!/bin/sh\n")
    assert needed.read_elf(tmp_path / "not-elf.so") is None
    # a process mapping hip6 by a file whose name says nothing: the SONAME is read from the ELF
    renamed = tmp_path / "mapped" / "hip-runtime.bin"
    renamed.parent.mkdir()
    shutil.copy2(libs["hip6"], renamed)
    st = renamed.stat()
    report = ProbeReport.from_json({"mapped": [{"path": str(renamed), "kind": None, "dev_major": os.major(st.st_dev),
                                                "dev_minor": os.minor(st.st_dev), "inode": st.st_ino}]})
    verdict = needed.check(libs["new-rocm7"], ["libMIOpen.so.1.0"], report, tmp_path / "target-lib", system={})
    assert [(c.needed, c.mapped) for c in verdict.conflicts] == [("libamdhip64.so.7", "libamdhip64.so.6")]
    ok = needed.check(libs["new-rocm6"], ["libMIOpen.so.1.0"], report, tmp_path / "target-lib", system={})
    assert not ok.conflicts and not ok.missing and ok.checked == ("libMIOpen.so.1.0",)
    assert needed.stem("libboost_filesystem.so.1.90.0") == "libboost_filesystem"
    assert needed.rocm_of("libamdhip64.so.7") == "ROCm 7" and needed.rocm_of("librocblas.so.5") is None


def test_ldconfig_names_count_as_found(tmp_path, libs):
    names = needed.ldconfig_names()
    if names is not None:  # a machine with an ldconfig: its cache holds the C library
        assert "libc.so.6" in names and names["libc.so.6"].startswith("/")
    report = ProbeReport.from_json({})
    far = tmp_path / "nowhere-lib"
    missing = needed.check(libs["new-nowhere"], ["libMIOpen.so.1.0"], report, far, system={})
    assert ("libMIOpen.so.1.0", "libnowhere.so.1") in missing.missing
    cached = needed.check(libs["new-nowhere"], ["libMIOpen.so.1.0"], report, far,
                          system={"libnowhere.so.1": "/somewhere/libnowhere.so.1", "libamdhip64.so.6": "/x"})
    assert not cached.missing and not cached.conflicts


def test_ldconfig_runs_only_for_a_name_found_nowhere_else(tmp_path, libs, monkeypatch):
    """``ldconfig -p`` is a process per apply: it starts only when a needed SONAME is neither mapped,
    nor the artifact's own, nor a file in a searched dir, and then once (a real ldconfig behind a
    logging shim first on PATH)."""
    real = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if Path(p).exists()), None)
    if real is None:
        pytest.skip("no ldconfig on this machine")
    log, shims = tmp_path / "ldconfig.log", tmp_path / "shims"
    shims.mkdir()
    (shims / "ldconfig").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    (shims / "ldconfig").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    hip6 = libs["hip6"]
    st = hip6.stat()
    report = ProbeReport.from_json({"mapped": [{"path": str(hip6), "kind": None, "dev_major": os.major(st.st_dev),
                                                "dev_minor": os.minor(st.st_dev), "inode": st.st_ino}]})
    # everything libMIOpen needs is mapped (hip6) or in a default dir (libc): no ldconfig
    ok = needed.check(libs["new-rocm6"], ["libMIOpen.so.1.0"], report, tmp_path / "target-lib")
    assert not ok.missing and not ok.conflicts and not log.exists()
    # libnowhere.so.1 is nowhere: ldconfig's cache is asked, once; the name stays missing
    far = needed.check(libs["new-nowhere"], ["libMIOpen.so.1.0"], report, tmp_path / "far-lib")
    assert ("libMIOpen.so.1.0", "libnowhere.so.1") in far.missing
    assert log.read_text().split() == ["-p"]
    # the same check for two libraries that each miss a name: still one ldconfig
    log.unlink()
    shutil.copytree(libs["new-nowhere"], tmp_path / "two", symlinks=True)
    shutil.copy2(libs["new-nowhere"] / "libMIOpen.so.1.0", tmp_path / "two" / "libMIOpenOther.so.1.0")
    both = needed.check(tmp_path / "two", ["libMIOpen.so.1.0", "libMIOpenOther.so.1.0"], report, tmp_path / "far-lib")
    assert len(both.missing) == 2 and log.read_text().split() == ["-p"]


def test_soname_read_from_the_dynamic_segment(tmp_path, libs):
    """``read_soname`` reads PT_DYNAMIC (as the loader does) and says what the ``.dynamic``
    section says, for a library whose file name says nothing; an object file (no PT_DYNAMIC, no
    DT_SONAME) and a file that is no ELF give None."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    from rocmbuild.store.artifact import read_soname

    odd = tmp_path / "runtime.bin"
    shutil.copy2(libs["hip7"], odd)
    with open(odd, "rb") as f:
        by_section = next(t.soname for s in ELFFile(f).iter_sections() if isinstance(s, DynamicSection)
                          for t in s.iter_tags() if t.entry.d_tag == "DT_SONAME")
    assert read_soname(odd) == by_section == "libamdhip64.so.7"
    assert read_soname(libs["new-rocm6"] / "libMIOpen.so.1.0") == "libMIOpen.so.1"
    src = tmp_path / "obj.c"
    src.write_text("int f(void){return 1;}\n")
    subprocess.run(["cc", "-c", "-fPIC", "-o", str(tmp_path / "obj.o"), str(src)], check=True)
    assert read_soname(tmp_path / "obj.o") is None
    (tmp_path / "text.so").write_text("not an ELF file\n")
    assert read_soname(tmp_path / "text.so") is None and read_soname(tmp_path / "missing.so") is None
