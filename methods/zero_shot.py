"""Zero-shot CoT (Kojima et al. 2022): the step-by-step instruction and no demonstrations."""
from __future__ import annotations

from bench.items import Item
from methods.base import FitContext, Selector, register


@register("zero-shot")
class ZeroShot(Selector):
    level = "task"

    def fit(self, ctx: FitContext) -> "ZeroShot":
        return self

    def select(self, query: Item) -> list[Item]:
        return []

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return 0  # no LLM call before inference

    def demos_per_prompt(self) -> int:
        return 0
