"""Task registry: name -> Task class."""
from __future__ import annotations

from bench.errors import ConfigError
from bench.metrics import BertScore
from bench.tasks.aquarat import AquaRat
from bench.tasks.base import Splits, Task
from bench.tasks.gsm8k import GSM8K
from bench.tasks.wmt19 import WMT19

TASKS: dict[str, type[Task]] = {"gsm8k": GSM8K, "aquarat": AquaRat, "wmt19": WMT19}


def make_task(name: str, bertscore: BertScore | None = None) -> Task:
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; known tasks: {', '.join(TASKS)}")
    return TASKS[name](bertscore=bertscore)


__all__ = ["TASKS", "Splits", "Task", "make_task"]
