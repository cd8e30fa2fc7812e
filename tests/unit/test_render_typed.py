"""The last renderers that read dicts read values now: a plan's tools (``store.cache.Inputs``), a
Debian package (``sources.debarchive.Package``), a substituted artifact's origin
(``store.provenance.Origin``), a rollback's warnings (``Check``) and prefix, a history's state
origins. The text and the JSON are what they were when the renderers read the dicts (each string
and object below was produced by the renderers before the change, from the same data as dicts)."""

from __future__ import annotations

from rocmbuild.cli import oneline, render
from rocmbuild.cli.statetext import origin_text
from rocmbuild.environment.probe import ProbeReport
from rocmbuild.results import (BuildPlan, Check, HistoryResult, InEffect, RollbackResult, ShowResult, SourcePlan,
                               StatusChanges, Verdict)
from rocmbuild.results.stateresult import StateOrigin
from rocmbuild.results.txnresult import TargetRef
from rocmbuild.sources.debarchive import Package
from rocmbuild.store.cache import Inputs, Tools
from rocmbuild.store.provenance import Origin
from rocmbuild.swap.pathstate import PathState
from rocmbuild.swap.plan import Action, Plan

SIGNED = Origin("https://cache.example/x", "e" * 64, "lab-1", "2026-01-01T00:00:00Z")
UNSIGNED = Origin("file:///srv/c", "f" * 64, None, "2026-01-02T00:00:00Z")
DEB = Package("libmiopen1", "7.2.4+dfsg-1", "amd64")
DEB_JSON = {"format": "deb", "name": "libmiopen1", "version": "7.2.4+dfsg-1", "architecture": "amd64"}


def test_a_rollback_with_nothing_to_undo_names_the_prefix_in_text_brief_and_json():
    where = {"prefix": "/env", "python": "/env/bin/python", "layout": None, "libdir": None, "state_dir": None}
    r = RollbackResult(None, None, (), None, (), (), (), target=TargetRef("/env", "/env/bin/python"))
    assert r.prefix == "/env"
    assert render.text(r) == "nothing to roll back in /env: no apply by rocmbuild is in effect"
    assert oneline.brief(r) == "nothing to roll back in /env"
    assert r.to_json()["target"] == where and r.to_json()["nothing_to_roll_back"] is True


def test_a_rollbacks_warnings_are_checks_named_in_its_text():
    a = Action("replace_file", "/env/lib/libMIOpen.so.1.0", "library", PathState("file", 1, 2, 3, 4, 0o644, ctime_ns=5),
               source="/b/x")
    plan = Plan("rollback", "/env", "/env/bin/python", "/env/lib", "conda", False, "/env/.rocmbuild", (a,),
                "/env/lib/libMIOpen.so.1.0", "/env/lib/libMIOpen.so.1.0", "3.5.1", "3.5.0", undoes=("0001-x",))
    report = ProbeReport.from_json({"python": "/env/bin/python", "prefix": "/env", "python_version": "3.11.7",
                                    "torch_version": "2.7.1", "hip": "7.0", "libraries": []})
    old = Check("compatibility", False, "3.5", "3.4", "older")
    v = Verdict(True, (Check("identity", True, "a", "a"), old), report).relaxed(("compatibility",))
    r = RollbackResult(plan, "0002-x", ("0001-x",), v, (), (), ())
    assert r.warnings == (old,) and r.prefix == "/env"
    assert render.text(r).splitlines()[2] == "verified /env/lib/libMIOpen.so.1.0 (3.5.0) with 1 warning(s): compatibility"


def test_a_build_plan_shows_its_tools_from_the_inputs_and_keeps_their_json():
    tools = Tools("cmake version 3.28.3", "cc (GCC) 13.2.0", "c++ (GCC) 13.2.0")
    inp = Inputs({"name": "mini"}, "c" * 40, None, (), (), (("A", "ON"),), (), "Release", "/opt/x", tools)
    plan = BuildPlan(recipe="mini", path="/r/mini.toml", gpu_targets=None, commands={}, env={}, destdir="/d",
                     source=SourcePlan("https://example.org/x.git", None, "c" * 40, True, None, (), (), ()),
                     cache_key="k" * 64, cached=False, inputs=inp, requirements=(), notes=())
    assert render.text(plan).splitlines()[-1] == "  tools    cmake version 3.28.3; cc (GCC) 13.2.0; c++ (GCC) 13.2.0"
    assert plan.to_json()["cache"]["inputs"] == inp.to_json()
    assert plan.to_json()["cache"]["inputs"]["tools"] == {"cc": "cc (GCC) 13.2.0", "cmake": "cmake version 3.28.3",
                                                          "cxx": "c++ (GCC) 13.2.0"}


def test_show_names_a_debian_package_with_or_without_its_architecture():
    apt = Package("libmiopen1", "7.2.4+dfsg-1", None)  # an apt: spec that names no architecture
    for pkg, words, as_json in ((apt, "(architecture known once fetched)", {**DEB_JSON, "architecture": None}),
                                (DEB, "(amd64)", DEB_JSON)):
        s = ShowResult("mini", "/r/mini.toml", "a recipe", {"name": "mini"}, (), "name = 'mini'\n", package=pkg)
        assert render.text(s).splitlines()[2] == f"from Debian package libmiopen1 7.2.4+dfsg-1 {words}"
        assert s.to_json()["package"] == as_json


def test_an_origin_reads_as_one_line_and_its_json_is_the_documented_object():
    assert origin_text(SIGNED) == ("substituted from https://cache.example/x (bundle sha256 eeeeeeeeeeeeeeee, "
                                   "signed by lab-1)")
    assert origin_text(UNSIGNED) == ("substituted from file:///srv/c (bundle sha256 ffffffffffffffff, "
                                     "unsigned (--allow-unsigned))")
    assert UNSIGNED.to_json() == {"url": "file:///srv/c", "bundle_sha256": "f" * 64, "signer": None,
                                  "imported": "2026-01-02T00:00:00Z"}


def test_status_shows_an_apply_in_effects_origin_and_package():
    t = InEffect("0001-x", "apply", "mini", "c" * 40, "3.5.0", "3.5.1", ("/env/lib/libMIOpen.so.1.0",), "/a",
                 substituted=SIGNED, package=DEB)
    lines = render.status_changes(StatusChanges(state_dirs=("/env/.rocmbuild",), in_effect=(t,)), "/env").splitlines()
    assert "    artifact substituted from https://cache.example/x (bundle sha256 eeeeeeeeeeeeeeee, signed by lab-1)" in lines
    assert "    from Debian package libmiopen1 7.2.4+dfsg-1 (amd64)" in lines
    assert t.to_json()["substituted"] == SIGNED.to_json() and t.to_json()["package"] == DEB_JSON


def test_history_says_where_a_state_dir_came_from():
    o = {"state_dir": "/env/.rocmbuild", "relation": "copied", "from": "/old"}
    h = HistoryResult("/env", (), (), 0, origins=(StateOrigin("/env/.rocmbuild", "copied", "/old"),))
    assert render.text(h).splitlines()[1] == ("this state was copied from /old (/env/.rocmbuild): its transactions ran "
                                              "there; rollback and recover act on this prefix only")
    assert h.to_json()["origins"] == [o]
