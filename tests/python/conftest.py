"""Shared by the Python tests: the project's rule for what is missing (a
package or ../shared data skips outside CI and fails under CI), and the
Hypothesis profile (no example database in the repository, no deadline on a
loaded 2-core machine, examples per property scaled by TKV_HYPOTHESIS_SCALE)."""
import importlib
import os

import pytest


def under_ci() -> bool:
    ci = os.environ.get("CI", "")
    return (ci not in ("", "0", "false")) or os.environ.get("TKV_REQUIRE_SHARED") == "1"


def require_module(name: str, debian: str):
    """Imports a module the tests need: skips the test (or, at import time,
    the test file) naming the Debian package when it is missing, and fails
    instead when CI is set."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        msg = f"missing Python package {name} (Debian: {debian}): {e}"
        if under_ci():
            pytest.fail("required under CI: " + msg, pytrace=False)
        pytest.skip(msg, allow_module_level=True)


try:
    from hypothesis import HealthCheck, settings

    # derandomize: the examples are a function of each test's name, so
    # `make test` cannot fail on one run and pass on the next;
    # TKV_HYPOTHESIS_RANDOM=1 draws fresh examples (exploration, not CI).
    settings.register_profile(
        "tkv", database=None, deadline=None, print_blob=True,
        derandomize=os.environ.get("TKV_HYPOTHESIS_RANDOM", "") != "1",
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    settings.load_profile("tkv")
except ImportError:  # test_properties.py reports it (require_module)
    pass


def examples(n: int) -> int:
    """Examples per property: n times TKV_HYPOTHESIS_SCALE (default 1)."""
    return max(1, int(round(n * float(os.environ.get("TKV_HYPOTHESIS_SCALE", "1")))))
