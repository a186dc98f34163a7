"""Task registry: name -> Task class. Built-in tasks, `register_task`, and the `bench.tasks` entry-point group."""
from __future__ import annotations

from importlib.metadata import entry_points

from bench.errors import ConfigError
from bench.metrics import BertScore
from bench.registry import registrar
from bench.tasks.aquarat import AquaRat
from bench.tasks.base import Splits, Task
from bench.tasks.gsm8k import GSM8K
from bench.tasks.wmt19 import WMT19

ENTRY_POINT_GROUP = "bench.tasks"
TASKS: dict[str, type[Task]] = {"gsm8k": GSM8K, "aquarat": AquaRat, "wmt19": WMT19}


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


def make_task(name: str, bertscore: BertScore | None = None) -> Task:
    load_task_entry_points()
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; known tasks: {', '.join(TASKS)}")
    return TASKS[name](bertscore=bertscore)


__all__ = ["TASKS", "Splits", "Task", "make_task", "register_task"]
