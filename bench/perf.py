"""`python -m bench perf`: the speed ratios of issue 4, measured in one run on the embedded model.

P3: one arm pull (the same demonstrations on N validation items), one call at a time / with the
    shared prefix prefilled once, plus whether the outputs are identical.
P4: milliseconds for the DEARICL surrogate to rank 1,000 candidate subsets for one query.
P5: share of a bandit round's wall time spent outside the LLM (bookkeeping + reward scoring), over
    rounds with fresh LLM calls.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench perf", description="Measure the speed ratios P3, P4, P5.")
    p.add_argument("--task", default="gsm8k")
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--items", type=int, default=20, help="validation items in the measured pull (P3)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--p5-pulls", type=int, default=4, help="bandit pulls measured for P5")
    p.add_argument("--p5-items", type=int, default=4, help="validation items per pull for P5")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    return p


def run(argv: list[str]) -> dict:
    args = parser().parse_args(argv)
    from bench.cli import default_data_dir
    from bench.encoder import Encoder
    from bench.llm.base import GenerationParams
    from bench.llm.embedded import EmbeddedGemma
    from bench.tasks import make_task

    task = make_task(args.task)
    splits = task.load_splits(args.data_dir or default_data_dir(), n_test=1, n_val=args.items, pool_size=200, seed=0)
    backend = EmbeddedGemma(batch_size=args.batch_size)
    backend.warm()
    prefix = task.prefix(splits.pool[:5])
    suffixes = [task.format_query(it) for it in splits.validation]
    params = GenerationParams(max_new_tokens=args.max_new_tokens, temperature=0.0, stop=task.stop)
    seeds = list(range(len(suffixes)))
    began = time.perf_counter()
    alone = [backend.generate([prefix + s], params, [seed])[0] for s, seed in zip(suffixes, seeds)]
    t_alone = time.perf_counter() - began
    began = time.perf_counter()
    shared = backend.generate_with_prefix(prefix, suffixes, params, seeds)
    t_shared = time.perf_counter() - began

    encoder = Encoder()
    dim = encoder.dim
    from dearicl.surrogates import NeuralConfig, NeuralSurrogate

    rng = np.random.default_rng(0)
    ranker = NeuralSurrogate(rng.normal(size=(20, dim)).astype(np.float32),
                             rng.normal(size=(1000, dim)).astype(np.float32), config=NeuralConfig())
    query, candidates = rng.normal(size=dim).astype(np.float32), np.arange(1000)
    ranker.rank_scores(query, candidates)  # builds the frozen snapshot once, as after training
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        ranker.rank_scores(query, candidates)
        times.append(time.perf_counter() - t0)

    p5 = _bandit_overhead(task, splits, encoder, backend, args)
    result = {
        "p3_speedup": t_alone / t_shared,
        "p3_outputs_identical": [g.text for g in alone] == [g.text for g in shared],
        "p4_rank_ms": 1000 * statistics.median(times),
        "p5_overhead_share": p5["share"],
        "details": {"p3_items": len(suffixes), "p3_seconds_one_at_a_time": t_alone, "p3_seconds_shared": t_shared,
                    "p3_prompt_tokens": sum(g.prompt_tokens for g in alone),
                    "p3_prefilled_tokens_shared": sum(g.prefilled_tokens for g in shared),
                    "max_new_tokens": args.max_new_tokens, "p5": p5},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return result


def _bandit_overhead(task, splits, encoder, backend, args) -> dict:
    """DEARICL rounds on the real LLM (no cache): outside-LLM seconds over wall seconds."""
    from bench.llm.base import GenerationParams
    from bench.llm.client import LLMClient
    from bench.metrics import BertScore, BertScoreConfig
    from bench.oracle import RewardOracle
    from dearicl.arms import arm_embeddings, build_arms
    from dearicl.bandit import BanditConfig, GapIndexTopM
    from dearicl.environments import OracleEnvironment
    from dearicl.surrogates import NeuralSurrogate

    validation = splits.validation[: args.p5_items]
    client = LLMClient(backend, None, None, GenerationParams(max_new_tokens=args.max_new_tokens, temperature=0.0))
    oracle = RewardOracle(client, task, "perf", BertScore(BertScoreConfig(model="local")))
    demo_emb = encoder.encode_items(splits.pool, with_output=True)
    arms = build_arms(demo_emb, 20, 5, 0)
    env = OracleEnvironment(oracle, splits.pool, arms, validation)
    surrogate = NeuralSurrogate(encoder.encode_items(validation), arm_embeddings(arms, demo_emb))
    result = GapIndexTopM(env, surrogate, BanditConfig(m=5, challengers=3, cold_start=1, epsilon=-1.0,
                                                       max_pulls=args.p5_pulls)).run()
    rounds = [r for r in result.trace if r["pulls_after"] > r["pulls"]]  # rounds that pulled (no cache here)
    wall = sum(r["seconds"] for r in rounds)
    outside = sum(r["seconds_outside_llm"] for r in rounds)
    return {"share": outside / wall if wall else float("nan"), "rounds": len(rounds), "wall_seconds": wall,
            "outside_seconds": outside}
