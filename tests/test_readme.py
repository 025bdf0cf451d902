"""Every example of the README runs: its fenced Python blocks (in one namespace, with a Spark
session as ``spark``) and its shell blocks, in order, against a temporary store in place of
/data/kop. An example that stops working fails here."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

from kop_spark import Broker

from .conftest import PYTHON, python_subprocess_env

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```", re.S | re.M)
# `kop consume` follows the topic until Ctrl-C, as kafka-console-consumer does; here it stops
# once a second has passed with nothing new.
_FOLLOWING_CONSUME = re.compile(r"^(kop .*\bconsume\b(?:(?!--timeout-ms)[^#\n])*?)(\s*#.*)?$", re.M)


def _blocks() -> list[tuple[str, str]]:
    return [(lang, code) for lang, code in _BLOCK.findall(README.read_text()) if "./dev.sh" not in code]


def test_the_readme_has_examples_of_each_kind():
    kinds = [lang for lang, _ in _blocks()]
    assert kinds.count("python") >= 2 and kinds.count("sh") >= 1


def test_every_readme_example_runs(spark, tmp_path):
    root, checkpoints = tmp_path / "kop", tmp_path / "checkpoints"
    namespace = {"spark": spark}
    env = {**python_subprocess_env(), "PATH": f"{os.path.dirname(PYTHON)}{os.pathsep}{os.environ['PATH']}"}
    for n, (lang, code) in enumerate(_blocks()):
        code = code.replace("/data/kop", str(root)).replace("/data/checkpoints", str(checkpoints))
        if lang == "python":
            exec(compile(code, f"README.md block {n}", "exec"), namespace)
        else:
            script = _FOLLOWING_CONSUME.sub(r"\1 --timeout-ms 1000", code)
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, env=env)
            assert out.returncode == 0, f"README block {n} failed:\n{out.stderr[-3000:]}"
    with Broker(str(root)) as b:  # the Spark example's query went through
        assert [r.value for p in range(4) for r in b.fetch("clicks-upper", p, 0)] == [b"/HOME"]
