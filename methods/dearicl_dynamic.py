"""DEARICL_dynamic: the trained surrogate ranks every arm seen in some U_t or C_t, per test query."""
from __future__ import annotations

import numpy as np

from bench.items import Item
from methods.bandit_base import BanditSelector
from methods.base import FitContext, register


@register("dearicl-dynamic")
class DearIclDynamic(BanditSelector):
    level = "instance"
    table_group = "bandit+ltr"

    def fit(self, ctx: FitContext) -> "DearIclDynamic":
        result = self.fit_neural(ctx)
        self.require_pulls(result)
        self.candidates_ = np.array(result.seen)
        return self

    def select(self, query: Item) -> list[Item]:
        return self.best_for_query(query, self.candidates_)
