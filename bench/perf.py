"""`python -m bench perf`: the speed ratios of issue 4, measured in one run on the embedded model.

P3: one arm pull (the same demonstrations on N validation items), one call at a time / with the
    shared prefix prefilled once and the items decoded as one left-padded batch, plus whether the
    outputs are identical; the median of --repeats timings of each.
P7 (--engines hf,llamacpp): the same pull (same prompts, greedy) on each engine: items/s, tokens/s, the
    share of outputs identical to the transformers path's, and p7_engine_speedup = best engine / transformers
    (medians of --repeats timings; each timing starts from a cold prefix).
P4: milliseconds for the DEARICL surrogate to rank 1,000 candidate subsets for one query.
P5: share of a bandit round's wall time spent outside the LLM (bookkeeping + reward scoring), over
    rounds with fresh LLM calls.
--model-config NAME --random-weights: a registered model's shape, randomly initialised: ms per decoding step,
    tokens/s, prefill tokens/s, peak memory, the fraction of the memory-bandwidth roofline, and projected hours of
    named workloads (bench/model_perf.py).
Scaling (--scaling-items N): items/s of `python -m bench --methods knn --pool-size 200` on N test items
    with 1 process and with `torchrun --nproc_per_node P` (cores / P threads each), from a fresh cache
    each time; wall time includes loading the model in every process.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.options import HelpFormatter, Parser, default_data_dir


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench perf", formatter_class=HelpFormatter,
                                description="Measure the speed ratios P3, P4, P5.")
    p.add_argument("--task", default="gsm8k", help="task whose prompts are timed")
    p.add_argument("--llm", default="gemma3-270m", choices=["gemma3-270m", "smollm2-135m"], help="embedded model")
    p.add_argument("--repeats", type=int, default=3, help="timings per measurement; the median is reported")
    p.add_argument("--engines", default=None,
                   help="comma-separated engines timed on the same pull for P7 (hf,llamacpp); P7 only when given")
    p.add_argument("--only-engines", action="store_true", help="measure P7 only (skip P3, P4, P5)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="data folder (default: BENCH_DATA_DIR, else ../shared/data beside the project)")
    p.add_argument("--items", type=int, default=20, help="validation items in the measured pull (P3)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens decoded per item in the timed pulls")
    p.add_argument("--prefix-batch-size", type=int, default=32, help="items decoded together after the prefix")
    p.add_argument("--p5-pulls", type=int, default=4, help="bandit pulls measured for P5")
    p.add_argument("--p5-items", type=int, default=4, help="validation items per pull for P5")
    p.add_argument("--scaling-items", type=int, default=0,
                   help="also measure items/s of a knn run on this many test items with 1 and 2 processes "
                        "(torchrun); 0 skips it")
    p.add_argument("--processes", default="1,2", help="process counts for --scaling-items")
    model = p.add_argument_group("a registered model's shape with random weights (bench/model_perf.py)")
    model.add_argument("--model-config", default=None, metavar="NAME",
                       help="measure this registered LLM's configuration (llama3.2-3b, gemma3-270m, ...) instead of "
                            "P3-P5; needs --random-weights")
    model.add_argument("--random-weights", action="store_true",
                       help="initialise the weights at random (speed and memory do not depend on their values)")
    model.add_argument("--batch-sizes", default="1,20,64,256,750", help="rows decoded together, comma-separated")
    model.add_argument("--prompt-tokens", type=int, default=512, help="tokens of each row's prompt")
    model.add_argument("--steps", type=int, default=32, help="decoding steps timed per batch size")
    model.add_argument("--layers", type=int, default=None,
                       help="keep the first N layers only (a CPU-sized check of the same code)")
    model.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                       help="weights' dtype (auto: bfloat16 on a GPU, float32 on a CPU)")
    p.add_argument("--out", "--json", dest="out", type=Path, default=None,
                   help="write the results here as JSON (--json is the old name)")
    return p


def _pull(task, args):
    splits = task.load_splits(args.data_dir or default_data_dir(), n_test=1, n_val=args.items, pool_size=200, seed=0)
    return splits, task.prefix(splits.pool[:5]), [task.format_query(it) for it in splits.validation]


def _timed(fn, repeats: int) -> tuple[float, list[float], object]:
    """(median seconds, all timings, the last result) of `repeats` calls."""
    times, result = [], None
    for _ in range(max(1, repeats)):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times), times, result


def run(argv: list[str]) -> dict:
    args = parser().parse_args(argv)
    from bench.errors import ConfigError
    from bench.llm.base import GenerationParams
    from bench.llm.embedded import EmbeddedModel
    from bench.tasks import make_task

    if args.model_config is not None or args.random_weights:
        return _model_config(args)
    engines = [e for e in (args.engines or "").split(",") if e]
    unknown = sorted(set(engines) - {"hf", "llamacpp"})
    if unknown:
        raise ConfigError(f"--engines: unknown engine {', '.join(unknown)} (hf, llamacpp)")
    if engines and engines[0] != "hf":
        raise ConfigError("--engines: list hf first (P7 is relative to the transformers path)")
    if args.only_engines and not engines:
        raise ConfigError("--only-engines needs --engines")
    task = make_task(args.task)
    splits, prefix, suffixes = _pull(task, args)
    params = GenerationParams(max_new_tokens=args.max_new_tokens, temperature=0.0, stop=task.stop)
    seeds = list(range(len(suffixes)))
    backend = EmbeddedModel(args.llm, prefix_batch_size=args.prefix_batch_size)
    backend.warm()
    result: dict = {"llm": args.llm, "details": {"p3_items": len(suffixes), "max_new_tokens": args.max_new_tokens,
                                                 "repeats": args.repeats}}

    def shared_pull(engine):
        engine.forget_prefix()  # a cold prefix each time: the pull as a bandit round meets it
        return engine.generate_with_prefix(prefix, suffixes, params, seeds)

    if not args.only_engines:
        t_alone, alone_times, alone = _timed(
            lambda: [backend.generate([prefix + s], params, [seed])[0] for s, seed in zip(suffixes, seeds)],
            args.repeats)
        t_shared, shared_times, shared = _timed(lambda: shared_pull(backend), args.repeats)
        result.update({
            "p3_speedup": t_alone / t_shared,
            "p3_outputs_identical": [g.text for g in alone] == [g.text for g in shared],
            "p4_rank_ms": _rank_ms(),
            "p5_overhead_share": None,
        })
        result["details"].update({
            "p3_seconds_one_at_a_time": t_alone, "p3_seconds_shared": t_shared,
            "p3_timings_one_at_a_time": alone_times, "p3_timings_shared": shared_times,
            "p3_prompt_tokens": sum(g.prompt_tokens for g in alone),
            "p3_prefilled_tokens_shared": sum(g.prefilled_tokens for g in shared)})
        p5 = _bandit_overhead(task, splits, backend, args)
        result["p5_overhead_share"] = p5["share"]
        result["details"]["p5"] = p5
        if args.scaling_items:
            result["scaling"] = _scaling(args)
    if engines:
        result["engines"] = _engines(engines, backend, shared_pull, args)
        base = result["engines"].get("hf")
        if base:
            best = max(row["items_per_second"] for row in result["engines"].values())
            result["p7_engine_speedup"] = best / base["items_per_second"]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return result


def _model_config(args) -> dict:
    """--model-config NAME --random-weights: bench/model_perf.py's measurement, printed and written to --out."""
    from bench.errors import ConfigError
    from bench.llm.registry import architecture_config
    from bench.model_perf import measure, render

    if args.model_config is None or not args.random_weights:
        raise ConfigError("--model-config NAME needs --random-weights (no weights are downloaded), and the other way")
    try:
        sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    except ValueError:
        raise ConfigError(f"--batch-sizes: comma-separated row counts, got {args.batch_sizes!r}") from None
    if not sizes or min(sizes) <= 0 or args.prompt_tokens < 2 or args.steps <= 0 or (args.layers or 1) <= 0:
        raise ConfigError("--batch-sizes, --prompt-tokens (2 or more), --steps and --layers must be positive")
    architecture_config(args.model_config)  # an unknown name fails here, before torch loads a model
    result = measure(args.model_config, batch_sizes=sizes, prompt_tokens=args.prompt_tokens, steps=args.steps,
                     layers=args.layers, dtype=args.dtype)
    print(render(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return result


def _engines(engines: list[str], hf_backend, shared_pull, args) -> dict:
    """The same shared-prefix pull on each engine: medians of --repeats timings, outputs vs transformers'."""
    from bench.llm.llamacpp import LlamaCppBackend

    out: dict[str, dict] = {}
    reference = None
    for name in engines:
        # the same rows in flight on both engines, as in a run (--prefix-batch-size)
        engine = hf_backend if name == "hf" else LlamaCppBackend(args.llm, parallel=args.prefix_batch_size)
        try:
            engine.warm()
            seconds, times, rows = _timed(lambda: shared_pull(engine), args.repeats)
        finally:
            if engine is not hf_backend:
                engine.close()
        texts = [g.text for g in rows]
        reference = reference or texts  # the transformers path comes first
        tokens = sum(g.completion_tokens for g in rows)
        out[name] = {"model_id": engine.model_id, "seconds": seconds, "timings": times,
                     "items_per_second": len(rows) / seconds, "tokens_per_second": tokens / seconds,
                     "completion_tokens": tokens,
                     "outputs_identical_to_hf": sum(a == b for a, b in zip(texts, reference)) / len(texts)}
    return out


def _rank_ms() -> float:
    """P4: median milliseconds for the neural surrogate to rank 1,000 candidate subsets for one query."""
    from bench.encoder import Encoder
    from dearicl.surrogates import NeuralConfig, NeuralSurrogate

    dim = Encoder().dim
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
    return 1000 * statistics.median(times)


def _bandit_overhead(task, splits, backend, args) -> dict:
    """DEARICL rounds on the real LLM (no cache): outside-LLM seconds over wall seconds."""
    from bench.encoder import Encoder
    from bench.llm.base import GenerationParams
    from bench.llm.client import LLMClient
    from bench.metrics import BertScore, BertScoreConfig
    from bench.oracle import RewardOracle
    from dearicl.arms import arm_embeddings, build_arms
    from dearicl.bandit import BanditConfig, GapIndexTopM
    from dearicl.environments import OracleEnvironment
    from dearicl.surrogates import NeuralSurrogate

    validation = splits.validation[: args.p5_items]
    encoder = Encoder()
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


def _scaling(args) -> dict:
    """Wall time and items/s of the same knn run with 1 and more processes (model loading included)."""
    from bench.errors import ConfigError

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    out: dict[str, dict] = {}
    for procs in (int(p) for p in args.processes.split(",")):
        if procs > 1 and torchrun is None:
            raise ConfigError("--scaling-items with more than one process needs torchrun (pip install torch)")
        launcher = [sys.executable, "-m"] if procs == 1 else [torchrun, "--standalone", "--nproc_per_node",
                                                                str(procs), "-m"]
        with tempfile.TemporaryDirectory() as tmp:
            # a 200-item pool: encoding the whole pool (every rank fits) would swamp the LLM time measured
            cmd = [*launcher, "bench", "--methods", "knn", "--tasks", args.task, "--n-test", str(args.scaling_items),
                   "--pool-size", "200",
                   "--max-new-tokens", str(args.max_new_tokens), "--data-dir", str(args.data_dir or default_data_dir()),
                   "--out", tmp, "--no-progress"]
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            if procs > 1:
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or procs) // procs))
            began = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - began
        if proc.returncode != 0:
            raise ConfigError(f"scaling run with {procs} process(es) failed: {proc.stderr.strip().splitlines()[-1:]}")
        out[str(procs)] = {"wall_seconds": wall, "items_per_second": args.scaling_items / wall}
    base = out.get("1")
    if base:
        for row in out.values():
            row["speedup"] = row["items_per_second"] / base["items_per_second"]
    return out
