"""dearicl-pac-dynamic (beyond the paper): per test query, the surrogate ranks the certified top-m set S.

Restricting the per-query choice to S keeps every choice within epsilon of the m-th best arm on validation
(when the certificate held); the network then picks the arm it expects to suit this query.
"""
from __future__ import annotations

import numpy as np

from bench.items import Item
from methods.bandit_base import PacSelector
from methods.base import FitContext, register


@register("dearicl-pac-dynamic")
class DearIclPacDynamic(PacSelector):
    level = "instance"

    def fit(self, ctx: FitContext) -> "DearIclPacDynamic":
        self.candidates_ = np.array(self.fit_pac(ctx).top_m)
        return self

    def select(self, query: Item) -> list[Item]:
        return self.best_for_query(query, self.candidates_)
