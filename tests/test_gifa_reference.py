"""The linear mode against published LinGIFA sample complexities (Réda et al., AISTATS 2021).

Instances and numbers: the result files published with the paper (GitHub clreda/linear-top-m,
Results/classic_*; 500 simulations each): theta = e1, Gaussian noise sigma = 0.5, delta = 0.05,
epsilon = 0, frequentist (Abbasi-Yadkori) threshold, lambda = sigma / 20, greedy rule, every arm
pulled once first. LinGIFA's mean samples: pi/3 213.4 (sd 62.7), pi/6 3019.6 (sd 829.7).
"""
import json
from pathlib import Path

import pytest

from bench.cli import main

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("csv, runs, published, tolerance", [
    ("reda_classic_pi3_K4_d3.csv", 100, 213.4, 0.15),
    ("reda_classic_pi6_K4_d3.csv", 40, 3019.6, 0.20),
])
def test_linear_mode_matches_published_lingifa(tmp_path, csv, runs, published, tolerance):
    out = tmp_path / "sim.json"
    code = main(["simulate", "--env", "linear", "--features-csv", str(DATA / csv), "--theta", "1,0,0",
                 "--noise", "0.5", "--methods", "case", "--m", "2", "--delta", "0.05", "--epsilon", "0",
                 "--beta", "frequentist", "--runs", str(runs), "--seed", "0", "--out", str(out), "--no-progress"])
    assert code == 0
    res = json.loads(out.read_text())["results"][0]
    assert res["error_rate"] <= 0.05  # (0, delta)-PAC
    assert abs(res["mean_pulls"] - published) <= tolerance * published
