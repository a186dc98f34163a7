"""Imports every built-in selector so that its @register runs."""
from methods import (case_dynamic, case_static, dearicl_dynamic, dearicl_noexplore, dearicl_random,  # noqa: F401
                     dearicl_static, few_shot, knn, mmr, zero_shot)
