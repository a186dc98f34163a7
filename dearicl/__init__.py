"""Shared machinery of the bandit selectors: gap-index top-m core, surrogates, ranking losses."""
