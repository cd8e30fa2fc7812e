"""Verdict.relaxed: named failed checks become warnings, and the JSON says so."""

from __future__ import annotations

from rocmbuild.environment.probe import ProbeReport
from rocmbuild.environment.verify import Check, Verdict

REPORT = ProbeReport.from_json({"python": "/env/bin/python", "prefix": "/env", "libraries": []})
OK = Check("identity", True, "the file placed", "it")
INCOMPATIBLE = Check("compatibility", False, "3.5", "3.6", "build 3.5")
WRONG = Check("version", False, "3.5.1", "3.6.0")


def test_unrelaxed_json_has_no_warnings_key():
    v = Verdict(False, (OK, INCOMPATIBLE), REPORT)
    assert v.warnings == () and v.failures() == (INCOMPATIBLE,)
    assert list(v.to_json()) == ["ok", "checks", "failures", "report"]


def test_relaxed_turns_named_failures_into_warnings():
    v = Verdict(False, (OK, INCOMPATIBLE), REPORT).relaxed(("compatibility",))
    assert v.ok and v.failures() == () and v.warnings == (INCOMPATIBLE,)
    assert v.checks == (OK, INCOMPATIBLE)
    data = v.to_json()
    assert data["ok"] is True and data["failures"] == []
    assert data["warnings"] == [INCOMPATIBLE.to_json()]
    assert [c["name"] for c in data["checks"]] == ["identity", "compatibility"]


def test_relaxed_keeps_other_failures_and_always_carries_warnings():
    v = Verdict(False, (OK, WRONG, INCOMPATIBLE), REPORT).relaxed(("compatibility",))
    assert not v.ok and v.failures() == (WRONG,) and v.to_json()["failures"] == ["version"]
    clean = Verdict(True, (OK,), REPORT).relaxed(("compatibility",))
    assert clean.ok and clean.to_json()["warnings"] == []


def test_a_message_several_smoke_checks_share_is_rendered_once():
    """Issue 27, item 6: the smoke suite's checks share one hint; the text says it under the first."""
    from rocmbuild.environment.smoke import check_smoke

    failed = [{"name": n, "status": "failed", "reason": "AssertionError: differs"} for n in ("matmul", "mlp")]
    lacking = [{"name": n, "status": "skipped", "cannot_run": True,
                "reason": "this torch cannot run it: AttributeError: module 'torch' has no attribute 'manual_seed'"}
               for n in ("batchnorm", "training")]
    report = ProbeReport.from_json({"python": "/env/bin/python", "prefix": "/env", "libraries": [],
                                    "smoke": {"status": "failed", "device": "cpu", "checks": failed + lacking}})
    checks = check_smoke(report)
    assert [c.ok for c in checks] == [False, False, True, True] and all(c.skipped for c in checks[2:])
    assert "wrong results" not in checks[2].message and "not PyTorch" in checks[2].message  # not the library's fault
    text = Verdict(False, tuple(checks), report).render()
    assert text.count(checks[0].message) == 1 and text.count(checks[2].message) == 1
    assert text.count("[FAIL]") == 2 and text.count("[skip]") == 2
