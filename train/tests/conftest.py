"""Test-suite policy shared by every test file.

``CCP_NO_SKIPS=1`` (set by ``.ci/run``: CI has everything the tests need) turns a skipped test
into a failure naming it and its reason, as ``ccp_runtime::testing::skip`` does for the Rust
tests: a test that cannot run there is a broken check, not a pass. The one exception is a test
marked ``@pytest.mark.may_skip``: it needs something of the host's network set-up that CI does
not promise (an IPv6 loopback address; containers often run with IPv6 off); its skip stays a
skip and is listed in ``ops/test.sh``'s summary.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

NO_SKIPS_ENV = "CCP_NO_SKIPS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "may_skip: a skip that CCP_NO_SKIPS=1 allows (see conftest)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    outcome = yield
    if os.environ.get(NO_SKIPS_ENV) != "1" or item.get_closest_marker("may_skip"):
        return
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"SKIP {item.nodeid}: {reason} ({NO_SKIPS_ENV}=1: a skipped test is a "
                        "failure)")
