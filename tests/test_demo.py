"""The README's first command: the demo pipeline, run twice on one store."""

import re
import subprocess

from .conftest import PYTHON, python_subprocess_env


def test_demo_runs_and_stays_exactly_once(root):
    for run in (1, 2):
        out = subprocess.run(
            [PYTHON, "-m", "kop_spark.demo", root],
            capture_output=True,
            text=True,
            env=python_subprocess_env(),
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"clicks: {2000 * run} records   clicks-enriched: {2000 * run} records" in out.stdout
        lags = [
            int(line.split()[5]) for line in out.stdout.splitlines() if re.match(r"click-enricher\s+clicks\s+\d", line)
        ]
        assert lags == [0, 0, 0]
