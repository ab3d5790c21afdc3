"""The three floors import one way and no floor holds an import cycle.

streams/ (Kafka, Redis, the worker, file I/O, the CLI) may import batch/ and online/; batch/
(training, registry, evaluation, simulation, the generator) may import online/; online/ (the
pure core) imports neither. The contracts are import-linter's, configured in pyproject.toml
(``[tool.importlinter]``); running them here makes an arrow back up, or a cycle, fail the build.
Function-local imports count too, so a lazy import cannot hide an upward arrow; and a project
module imported inside a function must say why (a start-up cost or an optional dependency),
so that deferral stays the exception.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("online", "batch", "streams")
#: The comment a function-local import of a project module must follow, saying why.
DEFERRED = ("# Deferred:", "# Optional:")


def test_the_floors_import_one_way_and_without_cycles() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _local_project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import of a project module made inside a function."""
    tree = ast.parse(path.read_text())
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            modules: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            found += [(node.lineno, m) for m in modules if m.split(".")[0] in FLOORS]
    return found


def test_project_modules_are_imported_inside_a_function_only_with_a_reason() -> None:
    unexplained = []
    for floor in FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            lines = path.read_text().splitlines()
            for line, module in _local_project_imports(path):
                above = lines[line - 2].strip()
                if not above.startswith(DEFERRED):
                    unexplained.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not unexplained, "function-local imports without a '# Deferred:' reason:\n" + "\n".join(
        unexplained
    )
