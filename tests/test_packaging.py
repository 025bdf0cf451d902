"""How kop-spark installs where its users are: without forcing a PySpark on a cluster that brings
its own, with one clear error where there is none (or too old a one), and as a wheel that carries
the compiled codec and builds without deprecation warnings."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from .conftest import PYTHON, python_subprocess_env

PROJECT = Path(__file__).resolve().parent.parent
NO_PYSPARK = "import sys; sys.modules['pyspark'] = None  # as if none were installed\n"


def run_python(code: str, *, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = python_subprocess_env()
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_it_asks_for_a_python_every_dependency_installs_on() -> None:
    """So pip refuses kop-spark by name on an older Python, rather than failing to find a dependency
    (kio installs on 3.11 and later only, and 3.10 was claimed)."""
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    ours = SpecifierSet(project["requires-python"])
    oldest = next(v for v in (f"3.{minor}" for minor in range(30)) if v in ours)
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["spark"]]:
        name = Requirement(requirement).name
        theirs = SpecifierSet(importlib.metadata.metadata(name).get("Requires-Python") or "")
        assert oldest in theirs, f"requires-python {ours} admits Python {oldest}; {name} needs {theirs}"


def test_the_spark_layer_says_which_pyspark_it_needs() -> None:
    missing = run_python(NO_PYSPARK + "import kop_spark.spark")
    assert missing.returncode != 0
    assert (
        "UnsupportedSparkError: format('kop') needs PySpark 4.0 to 4.3, and no pyspark is installed" in missing.stderr
    )
    assert 'pip install "kop-spark[spark]"' in missing.stderr


def test_an_old_pyspark_is_named(tmp_path: Path) -> None:
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text('__version__ = "3.5.1"\n')
    old = run_python("import kop_spark, pyspark_kop", path=tmp_path)
    assert "format('kop') needs PySpark 4.0 to 4.3; PySpark 3.5 is installed" in old.stderr


def test_storage_cli_and_kafka_server_work_without_pyspark(tmp_path: Path) -> None:
    code = (
        NO_PYSPARK
        + f"""
import asyncio
from kop_spark import Broker, Record
from kop_spark.cli import main
from kop_spark.kafka.server import KafkaServer

root = {str(tmp_path / "store")!r}
assert main(["--root", root, "topics", "create", "t"]) == 0
with Broker(root) as b:
    b.produce("t", [Record(b"v")], 0)
    assert b.fetch("t", 0, 0)[0].value == b"v"

    async def serve_briefly():
        server = KafkaServer(b, "PLAINTEXT://127.0.0.1:0")
        await server.start()
        await server.stop()

    asyncio.run(serve_briefly())
loaded = [m for m, module in sys.modules.items() if m.startswith("pyspark") and module is not None]
assert not loaded, loaded
print("ok")
"""
    )
    done = run_python(code)
    assert done.stdout.strip().endswith("ok"), done.stderr


def test_the_wheel_carries_the_compiled_twins_and_leaves_pyspark_to_the_runtime(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",  # the sdist, then the wheel from it: what PyPI users get
            "--no-isolation",
            "--outdir",
            str(tmp_path),
            str(PROJECT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert "deprecat" not in (built.stdout + built.stderr).lower(), built.stdout + built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    assert len(list(tmp_path.glob("*.tar.gz"))) == 1
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    for twin in ("kop_spark/record/_crecords", "kop_spark/storage/_centries"):
        assert any(n.startswith(twin) and n.endswith(".so") for n in names), twin
        assert f"{twin}.pyi" in names, twin
    assert "pyspark_kop/__init__.py" in names and "kop_spark/py.typed" in names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: pyspark")]
    assert requires and all('extra == "spark"' in line for line in requires), requires
    assert "License-Expression: Apache-2.0" in metadata
