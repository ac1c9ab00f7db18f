"""``CCP_NO_SKIPS=1`` makes a skipped Python test fail (``conftest.py``); without it a skip is
a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

def test_runs():
    assert True

def test_cannot_run_here():
    pytest.skip("needs a thing this host lacks")

@pytest.mark.skipif(True, reason="marked")
def test_marked():
    pass

@pytest.mark.may_skip
def test_allowed():
    pytest.skip("no IPv6 loopback")
"""


@pytest.mark.parametrize("env, failed, skipped", [("1", 2, 1), ("", 0, 3), ("0", 0, 3)])
def test_a_skip_fails_only_under_ccp_no_skips(pytester: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch, env: str,
                                              failed: int, skipped: int) -> None:
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(SKIPPING)
    monkeypatch.setenv("CCP_NO_SKIPS", env)
    r = pytester.runpytest("-p", "no:cacheprovider")
    got = r.parseoutcomes()
    # a skip in the call fails the test; a skip mark (the setup phase) errors it: both fail
    assert got.get("passed") == 1, got
    assert got.get("failed", 0) + got.get("errors", 0) == failed, got
    assert got.get("skipped", 0) == skipped, got
    if failed:
        r.stdout.fnmatch_lines(["*SKIP *test_cannot_run_here: *needs a thing this host lacks*"])
