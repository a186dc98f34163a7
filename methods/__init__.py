"""The selector zoo: one file per method, all behind the Selector contract."""
from bench.errors import BudgetExhausted, FitFailed
from bench.items import Item
from methods.base import FitContext, Selector, available, create, register

__all__ = ["BudgetExhausted", "FitFailed", "FitContext", "Item", "Selector", "available", "create", "register"]
