import os
import sys

import pytest

import kop_spark


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def broker(root):
    b = kop_spark.Broker(root)
    yield b
    b.close()


def python_subprocess_env():
    """Environment for child Python processes that import kop_spark from this checkout."""
    env = dict(os.environ)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable
