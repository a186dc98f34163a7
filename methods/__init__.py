"""The selector zoo: one file per method, all behind the Selector contract."""
from methods.base import FitContext, Selector, available, create, register

__all__ = ["FitContext", "Selector", "available", "create", "register"]
