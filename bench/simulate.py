"""`python -m bench simulate`: bandit methods against SIMULATED environments with known truth.

Everything written here is labelled simulated: rewards come from a formula, not from an LLM.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from bench.errors import ConfigError, DataError
from dearicl.arms import arm_embeddings, build_arms, slot_similarity_features
from dearicl.bandit import BanditConfig, GapIndexTopM
from dearicl.confidence import LUCB
from dearicl.environments import EmbeddingEnvironment, HiddenNonlinearReward, LinearEnvironment, load_reward_module
from dearicl.surrogates import LinearSurrogate, NeuralConfig, NeuralSurrogate

SIM_METHODS = {"case": ("linear", "greedy"), "dearicl": ("neural", "greedy"), "dearicl-random": ("neural", "random"),
               "lucb": ("model-free", "lucb")}  # lucb: per-arm anytime confidence sequences (dearicl/confidence.py)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench simulate",
                                description="Run bandit methods on SIMULATED reward environments with known truth.")
    p.add_argument("--env", choices=["linear", "nonlinear", "custom"], required=True)
    p.add_argument("--methods", default=None, help="comma-separated: case, dearicl, dearicl-random, lucb")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--m", type=int, default=None, help="top-m size (default 2 linear, 10 otherwise)")
    p.add_argument("--challengers", type=int, default=5)
    p.add_argument("--delta", type=float, default=0.05)
    p.add_argument("--epsilon", type=float, default=None, help="stop when B(ch,b) <= epsilon (default 0 linear, 0.1)")
    p.add_argument("--beta", choices=["heuristic", "frequentist", "lucb1"], default="heuristic")
    p.add_argument("--rule", choices=["greedy", "variance", "both"], default="greedy")
    p.add_argument("--budget", type=int, default=None, help="max pulls per run")
    p.add_argument("--patience", type=int, default=None,
                   help="rounds without a change of U_t required to stop (default: case 20 as in its script, "
                        "0 for dearicl as in Algorithm 1 and for the linear GIFA mode)")
    p.add_argument("--out", type=Path, default=None, help="JSON results (default: print)")
    p.add_argument("--plot", type=Path, default=None, help="PNG of gap index and simple regret per round")
    # linear
    p.add_argument("--features-csv", type=Path, help="linear: arms as rows, comma-separated, no header")
    p.add_argument("--theta", default=None, help="linear: comma-separated parameter vector")
    p.add_argument("--noise", type=float, default=None, help="reward noise std (default 0.5 linear, 0.1 otherwise)")
    # nonlinear / custom
    p.add_argument("--task", default="aquarat")
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--pool-size", type=int, default=300)
    p.add_argument("--n-arms", type=int, default=100)
    p.add_argument("--n-val", type=int, default=20)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--cold-start", type=int, default=5)
    p.add_argument("--reward-module", type=Path, help="custom: file defining reward(query_embedding, demo_embeddings, rng)")
    p.add_argument("--truth-samples", type=int, default=64, help="custom: draws averaged for the true means")
    p.add_argument("--no-progress", action="store_true")
    return p


def read_features(path: Path) -> np.ndarray:
    if path is None:
        raise ConfigError("--env linear needs --features-csv")
    if not path.is_file():
        raise DataError(f"features file not found: {path}")
    rows = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append([float(v) for v in line.split(",")])
        except ValueError:
            raise DataError(f"{path}:{line_no}: not a comma-separated row of numbers") from None
    if not rows or len({len(r) for r in rows}) != 1:
        raise DataError(f"{path}: rows must all have the same number of columns")
    return np.array(rows)


def embedding_world(args):
    """Arms from real pool examples and validation queries, embedded with the project's encoder."""
    from bench.cli import default_data_dir
    from bench.encoder import Encoder
    from bench.tasks import make_task

    task = make_task(args.task)
    splits = task.load_splits(args.data_dir or default_data_dir(), n_test=1, n_val=args.n_val,
                              pool_size=args.pool_size, seed=args.seed)
    enc = Encoder()
    demo = enc.encode_items(splits.pool, with_output=True)
    queries = enc.encode_items(splits.validation)
    arms = build_arms(demo, args.n_arms, args.k, args.seed)
    return arms, demo, queries


def run(argv: list[str]) -> dict:
    args = parser().parse_args(argv)
    linear = args.env == "linear"
    methods = (args.methods or ("case" if linear else "case,dearicl,dearicl-random")).split(",")
    for name in methods:
        if name not in SIM_METHODS:
            raise ConfigError(f"unknown simulate method '{name}'; known: {', '.join(SIM_METHODS)}")
        if linear and SIM_METHODS[name][0] == "neural":
            raise ConfigError(f"'{name}' needs query embeddings: use --env nonlinear or custom")
        if linear and SIM_METHODS[name][0] == "model-free":
            raise ConfigError(f"'{name}' needs rewards in [0, 1] (its confidence sequences assume them); "
                              "the linear environment's Gaussian rewards are unbounded")
    m = args.m or (2 if linear else 10)
    epsilon = args.epsilon if args.epsilon is not None else (0.0 if linear else 0.1)
    noise = args.noise if args.noise is not None else (0.5 if linear else 0.1)
    env_info: dict = {"name": args.env, "simulated": True, "m": m, "epsilon": epsilon, "delta": args.delta,
                      "noise": noise, "seed": args.seed}
    if linear:
        features = read_features(args.features_csv)
        if args.theta is None:
            raise ConfigError("--env linear needs --theta")
        theta = np.array([float(v) for v in args.theta.split(",")])
        env_info.update(features_csv=str(args.features_csv), theta=theta.tolist(), n_arms=len(features),
                        beta=args.beta)
        make_env = lambda rng: LinearEnvironment(features, theta, noise, rng)  # noqa: E731
    else:
        arms, demo, queries = embedding_world(args)
        if args.env == "nonlinear":
            hidden = HiddenNonlinearReward(demo.shape[1], seed=args.seed, noise=noise).calibrate(
                demo, queries, args.k, np.random.default_rng(args.seed))
            reward, expected = hidden, hidden.expected
        else:
            if args.reward_module is None:
                raise ConfigError("--env custom needs --reward-module FILE.py")
            reward, expected = load_reward_module(args.reward_module), None
        env_info.update(task=args.task, n_arms=len(arms), n_val=len(queries), pool_size=args.pool_size,
                        reward_module=str(args.reward_module) if args.reward_module else None)
        base = EmbeddingEnvironment(arms, demo, queries, reward, np.random.default_rng(args.seed), expected,
                                    truth_samples=args.truth_samples)
        make_env = base.with_rng

        case_features = slot_similarity_features(arms, demo, queries)
        arm_emb = arm_embeddings(arms, demo)
    results, traces = [], {}
    for name in methods:
        kind, rule = SIM_METHODS[name]
        pulls, regrets, seconds, stops, errors, eps_errors = [], [], [], {}, 0, 0

        def record(res) -> None:
            nonlocal errors, eps_errors
            truth = env.true_means
            errors += set(res.top_m) != set(np.argsort(-truth, kind="stable")[:m].tolist())
            # (epsilon, delta)-PAC: every returned arm within epsilon of the true m-th best
            eps_errors += bool(np.any(truth[res.top_m] < np.sort(truth)[::-1][m - 1] - epsilon - 1e-12))
            regrets.append(float(np.sort(truth)[::-1][:m].mean() - truth[res.top_m].mean()))
            pulls.append(res.pulls)
            stops[res.stopped_by] = stops.get(res.stopped_by, 0) + 1
        for r in tqdm(range(args.runs), desc=f"simulate {name}", disable=None if not args.no_progress else True):
            rng = np.random.default_rng([args.seed, r])
            env = make_env(rng)
            if kind == "model-free":
                began = time.perf_counter()
                res = LUCB(env, m, epsilon=epsilon, delta=args.delta, max_pulls=args.budget).run()
                seconds.append(time.perf_counter() - began)
                record(res)
                if r == 0:
                    traces[name] = res.trace
                continue
            if kind == "linear":
                feats = features if linear else case_features
                # the surrogate assumes the environment's noise level; GIFA's lambda = sigma / 20
                reg = (noise / 20) ** 2 if linear else 1.0
                surrogate = LinearSurrogate(feats, reg=reg, sigma=noise, delta=args.delta, beta=args.beta)
            else:
                surrogate = NeuralSurrogate(queries, arm_emb, delta=args.delta, config=NeuralConfig(seed=args.seed + r))
            cfg = BanditConfig(m=m, challengers=args.challengers, epsilon=epsilon, delta=args.delta,
                               rule=rule if rule == "random" else args.rule,
                               cold_start="all" if linear else args.cold_start, max_pulls=args.budget,
                               seed=args.seed * 1000 + r, max_rounds=200_000 if linear else 10_000,
                               patience=args.patience if args.patience is not None else
                               (20 if kind == "linear" and not linear else 0))
            began = time.perf_counter()
            res = GapIndexTopM(env, surrogate, cfg).run()
            seconds.append(time.perf_counter() - began)
            record(res)
            if r == 0:
                traces[name] = res.trace
        results.append({"method": name, "simulated": True, "runs": args.runs, "mean_pulls": float(np.mean(pulls)),
                        "error_rate": errors / args.runs, "eps_error_rate": eps_errors / args.runs,
                        "mean_simple_regret": float(np.mean(regrets)),
                        "pulls": pulls, "simple_regrets": regrets, "stopped_by": stops,
                        "mean_seconds": float(np.mean(seconds))})
    out = {"env": env_info, "results": results, "traces": traces}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2))
    if args.plot:
        from reports.plots import convergence_plot

        convergence_plot(traces, args.plot, title=f"SIMULATED {args.env} environment")
    return out
