"""Task registry: name -> Task class. Built-in tasks (the bundled specs in bench/tasks/specs/ among them), task
files (`--task-file`), `register_task`, and the `bench.tasks` entry-point group."""
from __future__ import annotations

import hashlib
from importlib.metadata import entry_points
from pathlib import Path

from bench.errors import ConfigError, unknown_name
from bench.metrics import BertScore
from bench.registry import registrar
from bench.tasks.aquarat import AquaRat
from bench.tasks.base import Splits, Task
from bench.tasks.gsm8k import GSM8K
from bench.tasks.rules import Rules
from bench.tasks.spec import load_spec, spec_task_class
from bench.tasks.wmt19 import WMT19

ENTRY_POINT_GROUP = "bench.tasks"
SPEC_DIR = Path(__file__).parent / "specs"
TASKS: dict[str, type[Task]] = {"gsm8k": GSM8K, "aquarat": AquaRat, "wmt19": WMT19}
TASKS.update({cls.name: cls for cls in (spec_task_class(load_spec(path)) for path in sorted(SPEC_DIR.glob("*.yaml")))})
TASKS["rules"] = Rules


register_task = registrar(TASKS, Task, "task", "register_task")
register_task.__doc__ = """Class decorator: make a Task subclass available as `--tasks NAME` (from a --plugin module, say)."""


def load_task_entry_points() -> None:
    """Tasks that installed packages declare under the entry-point group `bench.tasks`."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in TASKS:
            continue
        try:
            cls = ep.load()
        except Exception as exc:
            raise ConfigError(f"task entry point '{ep.name}' ({ep.value}) failed to load: {exc}") from None
        register_task(ep.name)(cls)


def load_task_file(path: Path) -> str:
    """Register the task a spec file defines (`--task-file`); its name, checked before any model loads."""
    spec = load_spec(path)
    known = TASKS.get(spec.name)
    if known is not None and getattr(known, "task_spec", None) is not None and \
            Path(known.task_spec.path).resolve() == Path(path).resolve():
        return spec.name
    if known is not None:
        raise ConfigError(f"task spec {path}: name '{spec.name}' is already a task ({known.__module__}); rename it")
    TASKS[spec.name] = spec_task_class(spec)
    return spec.name


def task_fingerprint(name: str) -> str:
    """A hash of the spec file behind a spec task ("" for a task written in Python, or an unknown name)."""
    spec = getattr(TASKS.get(name), "task_spec", None)
    return hashlib.sha256(Path(spec.path).read_bytes()).hexdigest()[:16] if spec is not None else ""


def make_task(name: str, bertscore: BertScore | None = None) -> Task:
    load_task_entry_points()
    if name not in TASKS:
        raise unknown_name("task", name, TASKS)
    return TASKS[name](bertscore=bertscore)


__all__ = ["TASKS", "Splits", "Task", "load_task_file", "make_task", "register_task", "task_fingerprint"]
