"""Few-shot CoT (Wei et al. 2022): k demonstrations drawn at random once, used for every query."""
from __future__ import annotations

from bench.items import Item
from methods.base import FitContext, Selector, register


@register("few-shot")
class FewShot(Selector):
    level = "task"

    def fit(self, ctx: FitContext) -> "FewShot":
        self.check_pool(ctx)
        self.demos_ = ctx.rng("few-shot").sample(ctx.pool, self.k)
        return self

    def select(self, query: Item) -> list[Item]:
        return list(self.demos_)
