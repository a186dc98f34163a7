"""The layers import one way: dearicl/ (algorithms) knows nothing of methods/ or reports/, and the
subcommands' modules do not import the CLI that dispatches to them."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "dearicl").glob("*.py")), ids=lambda p: p.name)
def test_algorithm_layer_imports_no_selector_or_report_code(path):
    bad = {m for m in imported_modules(path) if m.split(".")[0] in ("methods", "reports")}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("name", ["perf.py", "simulate.py", "runner.py", "options.py", "sweep.py", "api.py",
                                  "configure.py", "model_perf.py", "replay.py", "reward_table.py"])
def test_subcommand_modules_do_not_import_the_cli(name):
    assert "bench.cli" not in imported_modules(ROOT / "bench" / name)
