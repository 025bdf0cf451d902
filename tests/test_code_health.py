"""The architecture, kept: layers import only downwards, adapters reach storage only through its
read-plan types, and no class, module or function grows past what one reader can hold."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "kop_spark"
MAX_CLASS, MAX_MODULE, MAX_FUNCTION = 300, 500, 80

# What each part of the package may import from kop_spark (besides itself). The shared modules
# at the top (errors, clock, config and its changes, the settings, layout, retry, topic_name,
# partitioner) are below every layer.
SHARED = {
    *("errors", "clock", "config", "config_changes", "layout", "retry", "topic_name", "partitioner"),
    *("setting", "settings", "topic_settings"),
}
ALLOWED = {
    "record": SHARED,
    "storage": SHARED | {"record"},
    "group": SHARED | {"record"},
    "broker": SHARED | {"record", "storage", "group", "faults"},
    "faults": SHARED | {"storage.fileio"},
    # The adapters: storage only through the read plan, everything else through the Broker.
    "spark": SHARED | {"record", "broker", "storage.read_plan"},
    "kafka": SHARED | {"record", "broker", "storage.read_plan"},
    "cli": SHARED | {"record", "broker", "storage.read_plan", "kafka"},
    "demo": SHARED | {"__init__", "record", "broker", "spark", "cli"},
    "__init__": SHARED | {"record", "broker", "group.coordinator", "spark"},
}


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Modules of kop_spark that ``path`` imports, as dotted names below ``kop_spark``."""
    here = path.relative_to(PACKAGE).with_suffix("").parts
    package = here[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - (node.level - 1)])
                if node.module:
                    names = [".".join([*base, node.module])]
                else:
                    names = [_module_of(base, a.name) for a in node.names]
            elif node.module and node.module.startswith("kop_spark."):
                names = [node.module[len("kop_spark.") :]]
            else:
                continue
            out.update(n.strip(".") for n in names if n.strip("."))
        elif isinstance(node, ast.Import):
            out.update(a.name[len("kop_spark.") :] for a in node.names if a.name.startswith("kop_spark."))
    return out


def _module_of(base: list[str], name: str) -> str:
    """What ``from <base> import name`` imports: the module ``name`` if there is one, else ``base``."""
    path = PACKAGE.joinpath(*base, name)
    if path.with_suffix(".py").exists() or path.is_dir():
        return ".".join([*base, name])
    return ".".join(base) or "__init__"


def _allows(allowed: set[str], imported: str) -> bool:
    return any(imported == a or imported.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layers_import_only_downwards(path: pathlib.Path) -> None:
    part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    if part in SHARED:
        allowed = SHARED
    else:
        assert part in ALLOWED, f"{part}: a new part of the package needs its place in ALLOWED"
        allowed = ALLOWED[part]
    wrong = sorted(i for i in _imports(path) if i.split(".")[0] != part and not _allows(allowed, i))
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {wrong}, which its layer may not use"


def test_the_import_check_sees_imports() -> None:
    """The check above would pass on a module it could not read: make sure it reads them."""
    assert "storage.read_plan" in _imports(PACKAGE / "spark" / "partition_reader.py")
    assert "broker" in _imports(PACKAGE / "spark" / "offset_reader.py")
    assert not _allows(ALLOWED["spark"], "storage.managed_ledger")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_sizes(path: pathlib.Path) -> None:
    source = path.read_text()
    too_big = []
    if len(source.splitlines()) > MAX_MODULE:
        too_big.append(f"module of {len(source.splitlines())} lines")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
            if length > limit:
                too_big.append(f"{type(node).__name__} {node.name} of {length} lines")
    assert not too_big, (
        f"{path.relative_to(PACKAGE)}: {', '.join(too_big)} (limits: {MAX_CLASS}, {MAX_MODULE}, {MAX_FUNCTION})"
    )


def test_every_suppression_says_why() -> None:
    """A ``noqa`` or ``type: ignore`` left in the code carries its reason beside it."""
    repo = PACKAGE.parent
    sources = [p for d in ("kop_spark", "pyspark_kop", "tests", "bench") for p in sorted((repo / d).rglob("*.py"))]
    bare = []
    for path in (p for p in sources if p != pathlib.Path(__file__).resolve()):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for marker in ("# noqa", "# type: ignore"):
                at = line.find(marker)
                if at >= 0:
                    rest = line[at + len(marker) :].split("#", 1)
                    reason = rest[1] if len(rest) > 1 else rest[0].split(" - ", 1)[1] if " - " in rest[0] else ""
                    if not reason.strip():
                        bare.append(f"{path.relative_to(repo)}:{n}")
    assert not bare, f"suppressions without a reason: {bare}"
