"""Imports every built-in selector so that its @register runs."""
from methods import few_shot, knn, mmr, zero_shot  # noqa: F401
