"""Ablation: DEARICL_dynamic with uniformly random arms pulled instead of the gap-index frontier."""
from __future__ import annotations

from methods.base import register
from methods.dearicl_dynamic import DearIclDynamic


@register("dearicl-random")
class DearIclRandom(DearIclDynamic):
    def __init__(self, k: int = 5, **bandit):
        super().__init__(k, **{**bandit, "rule": "random"})
