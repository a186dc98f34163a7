"""Opt-in benchmarks of the hot non-LLM paths (pytest-benchmark):

    .venv/bin/python -m pytest -m benchmark --benchmark-enable

Deselected unless --benchmark-enable is given. Sizes follow the paper's settings: m = 10 top arms,
m' = 5 challengers, 20 validation queries, 384-d MiniLM embeddings, 256 MC-dropout passes,
a pool of 300 and 100 arms of k = 5. Random embeddings: the timings do not depend on the values.
"""
import numpy as np
import pytest

from dearicl.arms import arm_embeddings, build_arms, slot_similarity_features
from dearicl.bandit import BanditConfig, GapIndexTopM
from dearicl.environments import LinearEnvironment
from dearicl.surrogates import LinearSurrogate, NeuralConfig, NeuralSurrogate

pytestmark = pytest.mark.benchmark

DIM, N_POOL, N_ARMS, N_VAL, K = 384, 300, 100, 20, 5


def unit_rows(rng, n):
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(0)
    pool, validation = unit_rows(rng, N_POOL), unit_rows(rng, N_VAL)
    arms = build_arms(pool, N_ARMS, K, seed=0)
    surrogate = NeuralSurrogate(validation, arm_embeddings(arms, pool), config=NeuralConfig(mc_passes=256))
    for arm in range(12):  # a trained surrogate, as after a dozen pulls
        surrogate.observe(arm, rng.uniform(size=N_VAL))
    surrogate.update()
    upper, challengers = np.arange(10), np.arange(10, 15)
    return {"pool": pool, "validation": validation, "arms": arms, "surrogate": surrogate,
            "upper": upper, "challengers": challengers, "rng": rng}


def test_gap_index_over_upper_and_challengers(benchmark, world):
    """B(c, b) over C_t x U_t with fresh MC-dropout samples each time (as after every retraining)."""
    surrogate = world["surrogate"]
    env = LinearEnvironment(np.ones((N_ARMS, 2)), np.ones(2), noise=0.1, rng=world["rng"])  # only n_arms is used
    bandit = GapIndexTopM(env, surrogate, BanditConfig(m=10, challengers=5))

    def gap():
        surrogate.mc_cache = None
        return bandit.gap_matrix(world["challengers"], world["upper"])

    out = benchmark(gap)
    assert out.shape == (5, 10) and np.isfinite(out).all()


def test_mc_dropout_forward(benchmark, world):
    surrogate = world["surrogate"]
    arms = np.arange(15)

    def forward():
        surrogate.mc_cache = None
        return surrogate.mc_samples(arms)

    samples = benchmark(forward)
    assert samples.shape == (256, 15) and samples.std(axis=0).min() > 0  # dropout makes passes differ


def test_rank_1000_subsets_for_one_query(benchmark):
    rng = np.random.default_rng(1)
    ranker = NeuralSurrogate(unit_rows(rng, N_VAL), unit_rows(rng, 1000))
    query = unit_rows(rng, 1)[0]
    scores = benchmark(ranker.rank_scores, query, np.arange(1000))
    assert scores.shape == (1000,)


def test_dearicl_pair_features(benchmark, world):
    surrogate = world["surrogate"]
    x = benchmark(surrogate.pairs, np.arange(N_ARMS))
    assert tuple(x.shape) == (N_ARMS, N_VAL, 2 * DIM)


def test_case_slot_features(benchmark, world):
    x = benchmark(slot_similarity_features, world["arms"], world["pool"], world["validation"])
    assert x.shape == (N_ARMS, K)


def test_arm_construction(benchmark, world):
    arms = benchmark(build_arms, world["pool"], N_ARMS, K, 0)
    assert len(arms) == N_ARMS


def test_linear_widths(benchmark):
    rng = np.random.default_rng(2)
    features = rng.normal(size=(N_ARMS, K))
    surrogate = LinearSurrogate(features)
    for arm in range(20):
        surrogate.observe(arm, rng.uniform(size=1))
    surrogate.update()
    widths = benchmark(surrogate.widths, np.arange(10, 15), np.arange(10), 20)
    assert widths.shape == (5, 10) and (widths > 0).all()


# the selectors a table study replays (scripts/table_study.sh), with the paper schedule's DEARICL beside the harness's
REPLAYED = {"case-static": {}, "dearicl-static:paper": {"epochs_per_round": 1, "lr": 1e-4, "hidden": [256, 256, 128, 64]},
            "dearicl-static": {}, "lucb-static": {}, "dearicl-pac-static": {}, "dearicl-dynamic": {},
            "dearicl-random": {}, "dearicl-noexplore": {}, "dearicl-pac-dynamic": {}}


def test_replay_rq1_from_a_recorded_table(benchmark, data_dir, encoder, capsys):
    """Issue 38's goal: RQ1 replayed on every table x 50 seeds x every bandit in <= 15 minutes on 2 cores. Times one
    seed of every selector on the TREC table and reports the extrapolation and its ratio to the goal (no assert)."""
    from pathlib import Path

    from bench.replay import Replay

    tables = sorted((Path(__file__).resolve().parents[1] / "studies" / "tables").glob("*.npz"))
    replay = Replay.load(next(t for t in tables if t.name.startswith("trec")), data_dir, encoder)

    def one_seed():
        for name, params in REPLAYED.items():
            replay.fit_and_score(name, params, 0, 10, "rewards", 3000)

    seconds = benchmark.pedantic(one_seed, rounds=1, iterations=1)
    per_seed = benchmark.stats.stats.mean if seconds is None else seconds
    projected = per_seed * 50 * len(tables)
    benchmark.extra_info.update({"tables": len(tables), "seconds_one_seed_all_selectors": round(per_seed, 1),
                                 "projected_seconds_50_seeds_every_table": round(projected),
                                 "ratio_to_15_minute_goal": round(projected / 900, 2)})
    with capsys.disabled():
        print(f"\nreplay: one seed of {len(REPLAYED)} selectors {per_seed:.1f} s; 50 seeds x {len(tables)} tables "
              f"~{projected / 60:.0f} min, {projected / 900:.2f}x the 15-minute goal (one core of this machine)")
