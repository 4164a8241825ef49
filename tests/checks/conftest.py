"""Every check test runs with its own throw-away student package (a passing check saves into it)."""

import pytest


@pytest.fixture(autouse=True)
def _student_package(student_dir):
    return student_dir
