"""`python -m bench simulate`: bandit methods against environments with known truth.

Everything written here is labelled: SIMULATED where rewards come from a formula, RECORDED where they are a real
LLM's rewards replayed from a reward table (`--env table:FILE`, bench/reward_table.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from bench.errors import ConfigError, DataError, unknown_name
from bench.log import LOG
from bench.options import HelpFormatter, Parser, default_data_dir
from bench.provenance import float_path
from bench.run_options import positive
from dearicl.arms import arm_embeddings, build_arms, cluster_labels, slot_similarity_features
from dearicl.bandit import BanditConfig, GapIndexTopM
from dearicl.confidence import (CONFIDENCE_SEQUENCES, LUCB, QuantileLUCB, quantile_sample_size, quantile_target,
                                true_simple_regret)
from dearicl.environments import (EmbeddingEnvironment, LinearEnvironment, PopulationEnvironment, RecordedEnvironment,
                                  load_reward_module)
from dearicl.paired import PairedLUCB
from dearicl.pac import CertifiedTopM, PacConfig
from dearicl.surrogates import LinearSurrogate, NeuralConfig, NeuralSurrogate
from dearicl.testbeds import FAMILIES, TableEnvironment, check_noise, make_instance, realize_population

@dataclass(frozen=True)
class SimMethod:
    kind: str  # "linear" (CASE) | "neural" (DEARICL and its ablations) | "model-free" (LUCB) | "pac"
    rule: str = "greedy"
    neural: dict = field(default_factory=dict)  # NeuralConfig overrides: the ablations
    stop: str = "sequences"  # dearicl-pac's stop (dearicl/pac.py): the certificate, or the uncertified model stop
    cs: str | None = None  # a confidence sequence of its own (else --cs)
    lucb: dict = field(default_factory=dict)  # LUCB options: split ("uniform" | "lucb++"), sampling ("both" | "wider")
    case: dict = field(default_factory=dict)  # CASE's sigma and patience off the linear environment (CASE_DEFAULTS)


# CASE as the harness runs it (methods/bandit_base.py: sigma 0.5, patience 0, the gap rule alone as in Algorithm 1 and
# configs/paper.yaml); `case-script` is the other setting, the earlier replay's: sigma = --noise (0.1), patience 20
CASE_DEFAULTS = {"sigma": 0.5, "patience": 0}


SIM_METHODS = {
    "case": SimMethod("linear"),
    "case-script": SimMethod("linear", case={"sigma": "noise", "patience": 20}),  # CASE's script's patience of 20
    "dearicl": SimMethod("neural"),
    "dearicl-random": SimMethod("neural", "random"),
    "dearicl-cal0": SimMethod("neural", neural={"calibration": 0.0}),  # pure relaxed-NDCG loss
    "dearicl-paper-schedule": SimMethod("neural", neural={"epochs_per_round": 1, "lr": 1e-4}),  # Algorithm 1
    "dearicl-mc-mean": SimMethod("neural", neural={"estimate": "mc-mean"}),  # MC-dropout mean as mu_hat
    # every setting the paper states (configs/paper.yaml): Algorithm 1's one epoch a round at lr 1e-4, batch 16,
    # K = |A| in log(2K^2/delta) (l.1295), rho_hat the MC-dropout mean (l.1298), PiRank's (256, 256, 128, 64)
    # network (l.858; l.1295 names F_theta the PiRank surrogate), one set of N MC passes a round (l.1296); c_t constant
    # (it states none)
    "dearicl-paper": SimMethod("neural", neural={"epochs_per_round": 1, "lr": 1e-4, "batch_size": 16, "log_k": "arms",
                                                 "estimate": "mc-mean", "hidden": (256, 256, 128, 64),
                                                 "mc_draws": "per-round"}),
    "lucb": SimMethod("model-free", "lucb"),  # per-arm anytime confidence sequences (dearicl/confidence.py)
    "lucb-kl": SimMethod("model-free", "lucb", cs="kl"),  # KL-LUCB: Chernoff-KL sequences (Kaufmann & Kalyanakrishnan 2013)
    # LUCB++'s one-sided split: members' lower sides at delta / (2 (K - m)), outsiders' upper sides at delta / (2 m)
    "lucb-pp": SimMethod("model-free", "lucb", lucb={"split": "lucb++"}),
    # the same, pulling only the critical pair's arm with the wider one-sided radius (UGapE's rule)
    "lucb-pp-wider": SimMethod("model-free", "lucb", lucb={"split": "lucb++", "sampling": "wider"}),
    "lucb-wider": SimMethod("model-free", "lucb", lucb={"sampling": "wider"}),  # today's split, UGapE's rule
    # lucb-pp-wider on the plug-in sequence: one predictable lambda a pull instead of a mixture (QueryPlugInCS)
    "lucb-pp-plugin": SimMethod("model-free", "lucb", cs="query-plugin", lucb={"split": "lucb++", "sampling": "wider"}),
    "lucb-wor": SimMethod("model-free", "lucb", cs="wor"),  # --protocol population: the pool mean, without replacement
    "lucb-pp-wor": SimMethod("model-free", "lucb", cs="wor", lucb={"split": "lucb++"}),  # LUCB++ on the pool mean
    "lucb-pp-wider-wor": SimMethod("model-free", "lucb", cs="wor", lucb={"split": "lucb++", "sampling": "wider"}),
    # certifies one arm within epsilon of the top --rho fraction, at a cost independent of the number of arms
    "lucb-quantile": SimMethod("quantile", "lucb"),
    # the same with LUCB++'s split on its sample (m = 1: the best arm's upper side at delta / 4) and UGapE's sampling
    "lucb-quantile-pp": SimMethod("quantile", "lucb", lucb={"split": "lucb++", "sampling": "wider"}),
    # one-sided sequences on paired differences, on the same queries, at delta / (m (K - m)) a pair (dearicl/paired.py)
    "lucb-paired": SimMethod("paired", "lucb", cs="query-bernstein"),
    "lucb-paired-wor": SimMethod("paired", "lucb", cs="wor"),  # the same under --protocol population
    "lucb-paired-pp": SimMethod("paired", "lucb", cs="query-bernstein", lucb={"split": "lucb++"}),  # arms' split
    "lucb-paired-pp-wor": SimMethod("paired", "lucb", cs="wor", lucb={"split": "lucb++"}),
    "dearicl-pac": SimMethod("pac"),  # certified stop on the confidence sequences (dearicl/pac.py)
    "dearicl-pac-pp": SimMethod("pac", lucb={"split": "lucb++"}),  # the same stop, LUCB++'s one-sided split
    "dearicl-pac-model": SimMethod("pac", stop="model"),  # the earlier model-interval stop: NOT a certificate
}
ENVS = ("linear", *FAMILIES, "custom", "table:FILE")
DEFAULT_METHODS = "case,dearicl,dearicl-random,lucb,dearicl-pac"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench simulate", formatter_class=HelpFormatter,
                                description="Run bandit methods on SIMULATED reward environments with known truth. "
                                            "Testbed families (nonlinear, slots, pairwise, order, latent, difficulty) draw a "
                                            "new random instance per run; see dearicl/testbeds.py.")
    p.add_argument("--env", required=True, metavar="|".join(ENVS),
                   help="reward environment: linear (--features-csv, --theta), a SIMULATED testbed family, custom "
                        "(--reward-module), or table:FILE, a recorded table of real LLM rewards (bench table build)")
    p.add_argument("--table-reward", default="auto",
                   help="table:FILE: which recorded column a pull returns: rewards, metric, loglik or any other the "
                        "table holds (chrf, option_correct, option_prob; `bench table show` lists them); auto: rewards "
                        "where recorded, else loglik")
    p.add_argument("--methods", default=None,
                   help=f"comma-separated, or 'all': {', '.join(SIM_METHODS)} (default: {DEFAULT_METHODS}; "
                        "case only on linear; dearicl-pac-model stops on its model's intervals: NOT a certificate, its "
                        "stops read model-stop)")
    p.add_argument("--neural", default="", metavar="KEY=VALUE,...",
                   help="NeuralConfig overrides for the DEARICL methods (the open knobs: mc_passes, width_scale, "
                        "width_schedule, stability_init, bias_init, estimate, lr, epochs_per_round, batch_size, ...)")
    p.add_argument("--runs", type=positive, default=10, help="runs; each family run is a new random instance")
    p.add_argument("--seed", type=int, default=0, help="seed of the instances and the methods' randomness")
    p.add_argument("--m", type=int, default=None, help="top-m size (default 2 linear, 10 otherwise)")
    p.add_argument("--challengers", type=int, default=5, help="|C_t|: challengers kept beside the top m")
    p.add_argument("--delta", type=float, default=0.05, help="confidence parameter of the stop rules")
    p.add_argument("--epsilon", type=float, default=None, help="stop when B(ch,b) <= epsilon (default 0 linear, 0.1)")
    p.add_argument("--beta", choices=["heuristic", "frequentist", "lucb1"], default="heuristic",
                   help="CASE's confidence width (GIFA's beta)")
    p.add_argument("--rule", choices=["greedy", "variance", "both"], default="greedy",
                   help="which arm of the ambiguous pair (b_t, ch_t) a round pulls")
    p.add_argument("--budget", type=int, default=None, help="max pulls per run")
    p.add_argument("--cs", choices=CONFIDENCE_SEQUENCES, default="query-bernstein",
                   help="the confidence sequence of lucb and dearicl-pac (dearicl/confidence.py)")
    p.add_argument("--patience", type=int, default=None,
                   help="rounds without a change of U_t required to stop (default 0: the gap rule alone, as in "
                        "Algorithm 1 and the harness's CASE; case-script: 20, as in CASE's script)")
    p.add_argument("--out", type=Path, default=None, help="JSON results (default: print)")
    p.add_argument("--update", action="store_true",
                   help="--out exists: rerun only --methods and replace their rows in it, the others kept (the same "
                        "environment and settings are required, so every row stays comparable)")
    p.add_argument("--checkpoint", type=Path, default=None, metavar="FILE.jsonl",
                   help="each finished run appended to FILE; a rerun with the same settings (any --runs) takes those "
                        "runs back and computes only the others, with the same results (each run is seeded by its "
                        "index): a row of slow runs (the paper's 100 epochs a round) finishes over several sittings")
    p.add_argument("--plot", type=Path, default=None, help="PNG of gap index and simple regret per round (run 0)")
    p.add_argument("--scatter", type=Path, default=None, help="PNG: mean pulls vs eps-error rate per method")
    # linear
    p.add_argument("--features-csv", type=Path, help="linear: arms as rows, comma-separated, no header")
    p.add_argument("--theta", default=None, help="linear: comma-separated parameter vector")
    p.add_argument("--noise", type=float, default=None,
                   help="reward noise std (default 0.5 linear; 0.1 otherwise: per-query std of the Beta rewards)")
    # embedding-based environments
    p.add_argument("--task", default="aquarat", help="task whose pool embeddings build the arms (families, custom)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="data folder (default: BENCH_DATA_DIR, else ../shared/data beside the project)")
    p.add_argument("--pool-size", type=int, default=300, help="pool items the arms are drawn from")
    p.add_argument("--n-arms", type=int, default=100, help="arms (k-subsets of the pool) per instance")
    p.add_argument("--n-val", type=int, default=20, help="validation queries: a pull returns one reward per query")
    p.add_argument("--protocol", choices=["fixed", "population"], default="fixed",
                   help="fixed = every pull covers the same --n-val items (the target is their mean); "
                        "population = pull t of every arm draws batch t of one shuffle of the whole pool without "
                        "replacement (the target is the pool mean; lucb-wor, lucb-paired-wor): a table's validation "
                        "pool, or a family's --n-val queries with one realized reward per (arm, query)")
    p.add_argument("--rho", type=float, default=0.1,
                   help="lucb-quantile: certify one arm within epsilon of the top rho fraction of the arms")
    p.add_argument("--batch", type=int, default=None,
                   help="--protocol population: rewards per pull (a table: default --n-val; a family: required)")
    p.add_argument("--k", type=int, default=5, help="demonstrations per arm")
    p.add_argument("--cold-start", type=int, default=5, help="arms pulled once before the first round")
    p.add_argument("--reward-module", type=Path, help="custom: file defining reward(query_embedding, demo_embeddings, rng)")
    p.add_argument("--upper-share", type=float, default=0.5,
                   help="lucb-pp methods: the share of delta given to the upper sides (LUCB++: 0.5); a tuning knob, "
                        "chosen on a tuning family before measurement (studies/bandit/certification/PREREGISTRATION.md)")
    p.add_argument("--mixture-weight", type=float, default=None,
                   help="the per-query Bernstein sequence of the lucb methods: the mixture's weight on lambda = 0.95 "
                        "(default: 0.63, weights ~ 1/(j+1)^2); a tuning knob, as --upper-share")
    p.add_argument("--lookahead", type=float, default=None,
                   help="the plug-in sequence (cs query-plugin, lucb-pp-plugin): each pull's lambda aims at the variance "
                        "after this many times the pulls so far (default 2, >= 1); a tuning knob, as --upper-share")
    p.add_argument("--truth-samples", type=truth_samples, default=64, metavar="N|auto",
                   help="custom without expected(): draws per (arm, query) averaged for the true means; auto: until "
                        "every arm's standard error is below epsilon / 10 (at most 4096). A truth whose standard error "
                        "is not below epsilon / 10 cannot judge eps-error or coverage: they are marked not judged")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def parse_neural(text: str) -> dict:
    """`KEY=VALUE,...` into NeuralConfig overrides, each value cast to its field's type; checked before any run."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(NeuralConfig) if f.name != "seed"}
    out: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in fields:
            raise ConfigError(f"--neural: expected KEY=VALUE with KEY one of {', '.join(fields)}, got {part!r}")
        default = getattr(NeuralConfig(), key)
        try:
            out[key] = (tuple(int(v) for v in value.split("x")) if isinstance(default, tuple)
                        else type(default)(value))
        except ValueError:
            raise ConfigError(f"--neural: {key} needs a {type(default).__name__}, got {value!r}") from None
    NeuralConfig(**out)  # unknown schedule or estimate names fail here
    return out


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
    """Real pool examples and validation queries, embedded with the project's encoder."""
    from bench.encoder import Encoder
    from bench.tasks import make_task

    task = make_task(args.task)
    splits = task.load_splits(args.data_dir or default_data_dir(), n_test=1, n_val=args.n_val,
                              pool_size=args.pool_size, seed=args.seed)
    enc = Encoder()
    return enc.encode_items(splits.pool, with_output=True), enc.encode_items(splits.validation)


@dataclass
class World:
    """One run's environment factory and the features each model class sees."""

    make_env: object  # rng -> environment
    case_features: np.ndarray | None = None
    arm_emb: np.ndarray | None = None
    queries: np.ndarray | None = None


def parse_methods(args, linear: bool) -> list[str]:
    spec = args.methods or ("case" if linear else DEFAULT_METHODS)
    if not 0 < args.upper_share < 1 or args.mixture_weight is not None and not 0 < args.mixture_weight < 1:
        raise ConfigError("--upper-share and --mixture-weight must be in (0, 1)")
    if args.lookahead is not None and not 1 <= args.lookahead < math.inf:
        raise ConfigError(f"--lookahead must be finite and >= 1, got {args.lookahead}")
    population = args.protocol == "population"
    if population and not (args.env.startswith("table:") or args.env in FAMILIES):
        raise ConfigError("--protocol population samples a finite pool without replacement: use --env table:FILE or a "
                          f"testbed family ({', '.join(FAMILIES)})")
    if population and args.env in FAMILIES and not (args.batch and args.batch < args.n_val):
        raise ConfigError("--protocol population on a testbed family: --n-val is the pool, give --batch below it "
                          "(rewards per pull)")
    methods = list(SIM_METHODS) if spec == "all" else spec.split(",")
    if spec == "all":
        methods = ["case"] if linear else [n for n in methods if (SIM_METHODS[n].cs == "wor") == population]
    for name in methods:
        if name not in SIM_METHODS:
            raise unknown_name("simulate method", name, SIM_METHODS)
        if population and SIM_METHODS[name].cs != "wor":
            raise ConfigError(f"'{name}' assumes a fixed validation set or independent rewards; under --protocol "
                              "population only the -wor methods run (their sequences sample without replacement)")
        if not population and SIM_METHODS[name].cs == "wor":
            raise ConfigError(f"'{name}' samples a finite population without replacement: add --protocol population "
                              "(with --env table:FILE or a testbed family)")
        kind = SIM_METHODS[name].kind
        if linear and kind in ("neural", "pac"):
            raise ConfigError(f"'{name}' needs query embeddings: use --env nonlinear or another family")
        if kind == "quantile" and not 0 < args.rho <= 1:
            raise ConfigError(f"--rho must be in (0, 1], got {args.rho}")
        if linear and kind in ("model-free", "quantile", "paired"):
            raise ConfigError(f"'{name}' needs rewards in [0, 1] (its confidence sequences assume them); "
                              "the linear environment's Gaussian rewards are unbounded")
    return methods


def table_world(args, env_info: dict, encoder=None):
    """table:FILE: the recorded table's arms and items, embedded as the harness embeds them; per run, a seeded
    --n-val of the table's validation pool is what the bandit pulls on (the truth stays the whole pool)."""
    from bench.encoder import Encoder
    from bench.reward_table import RewardTable, table_splits
    from dearicl.arms import ArmSet

    path = Path(args.env.split(":", 1)[1])
    table = RewardTable.load(path)
    meta = table.meta
    _, splits, members = table_splits(table, args.data_dir or default_data_dir(), path)
    items = {it.id: it for it in splits.validation + splits.test}
    enc = encoder or Encoder()  # a caller's encoder keeps its embeddings between runs (the knob sweep's settings)
    demo = enc.encode_items(splits.pool, with_output=True)
    pool_rows = table.validation
    queries_all = enc.encode_items([items[i] for i in table.item_ids[pool_rows]])
    arms = ArmSet(members=members, clusters=np.zeros(len(splits.pool), dtype=np.int64))
    n_val = min(args.n_val, len(pool_rows))
    reward = table.default_reward if args.table_reward == "auto" else args.table_reward
    values = table.values(reward)
    values = values[:, :, None] if values.ndim == 2 else values
    env_info.update(table=str(path), task=meta["task"], model=meta["model"], n_arms=len(members), k=meta["k"],
                    n_val=n_val, validation_pool=len(pool_rows), samples=values.shape[2], reward=reward,
                    protocol=args.protocol, batch=(args.batch or n_val) if args.protocol == "population" else None,
                    simulated=False, recorded=True)
    cache: dict[int, World] = {}

    def instance(run: int) -> World:
        if run not in cache:
            pick = np.sort(np.random.default_rng([args.seed, run, 2]).choice(len(pool_rows), n_val, replace=False))
            queries = queries_all[pick]
            if args.protocol == "population":
                batch = args.batch or n_val
                make = lambda rng: PopulationEnvironment(values, pool_rows, batch, rng)  # noqa: E731
            else:
                make = lambda rng: RecordedEnvironment(values, pool_rows[pick], pool_rows, rng)  # noqa: E731
            cache[run] = World(make,
                               case_features=slot_similarity_features(arms, demo, queries),
                               arm_emb=arm_embeddings(arms, demo), queries=queries)
        return cache[run]

    return instance


def worlds(args, noise: float, env_info: dict, encoder=None):
    """A function run -> World: a new instance per run for the families, one fixed world otherwise."""
    if args.env.startswith("table:"):
        return table_world(args, env_info, encoder)
    if args.env not in ENVS:
        raise ConfigError(f"--env must be one of {', '.join(ENVS)}, got {args.env!r}")
    if args.env == "linear":
        features = read_features(args.features_csv)
        if args.theta is None:
            raise ConfigError("--env linear needs --theta")
        theta = np.array([float(v) for v in args.theta.split(",")])
        LinearEnvironment(features, theta, noise, np.random.default_rng(0))  # validates the shapes now
        env_info.update(features_csv=str(args.features_csv), theta=theta.tolist(), n_arms=len(features),
                        beta=args.beta)
        world = World(lambda rng: LinearEnvironment(features, theta, noise, rng), case_features=features)
        return lambda run: world
    if args.env == "custom" and args.reward_module is None:
        raise ConfigError("--env custom needs --reward-module FILE.py")
    reward, expected = load_reward_module(args.reward_module) if args.env == "custom" else (None, None)
    if args.env in FAMILIES:
        check_noise(noise)  # before the encoder loads
    demo, queries = embedding_world(args)
    env_info.update(task=args.task, n_arms=args.n_arms, n_val=len(queries), pool_size=args.pool_size, k=args.k,
                    reward_module=str(args.reward_module) if args.reward_module else None, protocol=args.protocol,
                    batch=args.batch if args.protocol == "population" else None)

    def features(arms) -> dict:
        return {"case_features": slot_similarity_features(arms, demo, queries),
                "arm_emb": arm_embeddings(arms, demo), "queries": queries}

    if args.env == "custom":
        arms = build_arms(demo, args.n_arms, args.k, args.seed)
        epsilon = args.epsilon if args.epsilon is not None else 0.1
        base = EmbeddingEnvironment(arms, demo, queries, reward, np.random.default_rng(args.seed), expected=expected,
                                    truth_samples=args.truth_samples, target_se=epsilon / 10)
        # the truth's own noise: eps-error and coverage are judged only where it resolves epsilon
        env_info.update(truth="exact (expected)" if expected is not None else
                        f"estimated: {base.truth_draws} draws per (arm, query)",
                        truth_se_max=float(base.truth_se.max()), truth_judges=bool(base.truth_se.max() < epsilon / 10))
        world = World(base.with_rng, **features(arms))
        return lambda run: world
    labels = cluster_labels(demo, args.k, args.seed)
    cache: dict[int, World] = {}

    def instance(run: int) -> World:
        if run not in cache:
            inst = make_instance(args.env, demo, queries, labels, args.n_arms, args.k, seed=[args.seed, run, 1])
            if args.protocol == "population":  # the pool: one realized reward per (arm, query), sampled w/o replacement
                values = realize_population(inst.p, noise, np.random.default_rng([args.seed, run, 3]))
                make = lambda rng: PopulationEnvironment(values, np.arange(len(queries)), args.batch, rng)  # noqa: E731
            else:
                make = lambda rng: TableEnvironment(inst.p, noise, rng)  # noqa: E731
            cache[run] = World(make, **features(inst.arms))
        return cache[run]

    return instance


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error across runs (instances)."""
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / np.sqrt(len(arr))) if len(arr) > 1 else float("nan")
    return float(arr.mean()), se


def upper_bound95(errors: list) -> float:
    """One-sided 95% Clopper-Pearson upper bound of an error rate (0 errors in n runs: 1 - 0.05^(1/n))."""
    n, k = len(errors), int(sum(errors))
    return float(stats.beta.ppf(0.95, k + 1, n - k)) if k < n else 1.0


def lucb_knobs(spec: SimMethod, args) -> dict:
    """--upper-share (LUCB++ splits), --mixture-weight (per-query Bernstein) and --lookahead (plug-in) where they
    apply and differ from their defaults: the recorded settings name only knobs that changed something."""
    knobs = {}
    if spec.lucb.get("split") == "lucb++" and args.upper_share != 0.5:
        knobs["upper_share"] = args.upper_share
    if (spec.cs or args.cs) == "query-bernstein" and args.mixture_weight is not None:
        knobs["first_weight"] = args.mixture_weight
    if (spec.cs or args.cs) == "query-plugin" and args.lookahead is not None:
        knobs["lookahead"] = args.lookahead
    return knobs


def truth_samples(value: str) -> int | str:
    if value == "auto":
        return value
    n = int(value)
    if n < 2:
        raise argparse.ArgumentTypeError(f"must be auto or at least 2, got {value}")
    return n


def lower_bound95(successes: list) -> float:
    """One-sided 95% Clopper-Pearson lower bound of a success rate (n successes in n runs: 0.05^(1/n))."""
    n, k = len(successes), int(sum(successes))
    return float(stats.beta.ppf(0.05, k, n - k + 1)) if k > 0 else 0.0


def _plain(value):
    """numpy scalars and arrays as JSON's own types (a checkpoint line)."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def checkpoint_key(args, name: str) -> str:
    """A method's runs under these settings: its name, what it is (SIM_METHODS' entry: an edited method is not taken
    back) and every option but --runs and where things go."""
    record = {k: v for k, v in run_arguments(args).items() if k not in ("runs", "checkpoint")}
    keyed = {"method": name, "definition": asdict(SIM_METHODS[name]), "arguments": record}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def checkpointed(args, name: str) -> tuple[str, dict[int, dict]]:
    """The key of this method's runs under these settings (every option but --runs and where things go), and the runs
    --checkpoint already holds under that key; lines of other settings or methods are left alone."""
    key = checkpoint_key(args, name)
    saved: dict[int, dict] = {}
    if args.checkpoint and args.checkpoint.is_file():
        text = args.checkpoint.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):  # a line cut by a kill: the next run starts a line of its own
            with args.checkpoint.open("a", encoding="utf-8") as f:
                f.write("\n")
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill: that run is computed again
            if entry.get("key") == key:
                saved[int(entry["run"])] = entry
        if saved:
            LOG.info("%s: %d runs taken back from %s", name, sum(r < args.runs for r in saved), args.checkpoint)
    return key, saved


def absorb(entry: dict, per_run: dict, stops: dict, trace0: list) -> dict:
    """One run's values into the method's lists (fresh or taken back from a checkpoint alike)."""
    for k, values in per_run.items():
        if k in entry:
            values.append(entry[k])
    stops[entry["stopped_by"]] = stops.get(entry["stopped_by"], 0) + 1
    if "trace" in entry:
        trace0[:] = entry["trace"]
    return entry


def run_method(name: str, args, world_of, m: int, epsilon: float, noise: float, linear: bool) -> tuple[dict, list]:
    spec = SIM_METHODS[name]
    surrogate_knobs = {**spec.neural, **args.neural_overrides}  # NeuralConfig of the DEARICL methods (and dearicl-pac)
    per_run: dict[str, list] = {"pulls": [], "rounds": [], "calls": [], "error": [], "eps_error": [], "regret": [],
                                "coverage": [], "seconds": [], "eps_error_pool": [], "oracle_floor_pool": [],
                                "regret_pool": [], "event": [], "sample_miss": []}
    stops: dict[str, int] = {}
    trace0: list = []  # run 0's trace, filled in place
    # CASE off GIFA's linear environment: the harness's sigma and patience, or the named variant's
    case = {**CASE_DEFAULTS, **spec.case}
    case_sigma = noise if linear or case["sigma"] == "noise" else case["sigma"]
    patience = args.patience if args.patience is not None else (case["patience"] if spec.kind == "linear" and not linear
                                                                else 0)
    key, saved = checkpointed(args, name)
    for r in tqdm(range(args.runs), desc=f"simulate {name}", disable=True if args.no_progress else None):
        if r in saved:  # finished in an earlier sitting under the same settings
            last = absorb(saved[r], per_run, stops, trace0)
            continue
        entry: dict = {"key": key, "run": r}
        world = world_of(r)
        env = world.make_env(np.random.default_rng([args.seed, r]))
        began = time.perf_counter()
        if spec.kind == "model-free":
            res = LUCB(env, m, epsilon=epsilon, delta=args.delta, max_pulls=args.budget, cs=spec.cs or args.cs,
                       **spec.lucb, **lucb_knobs(spec, args)).run()
        elif spec.kind == "paired":
            res = PairedLUCB(env, m, epsilon=epsilon, delta=args.delta, max_pulls=args.budget, cs=spec.cs,
                             **spec.lucb).run()
        elif spec.kind == "quantile":
            quantile = QuantileLUCB(env, args.rho, epsilon=epsilon, delta=args.delta, max_pulls=args.budget,
                                    cs=spec.cs or args.cs, seed=args.seed * 1000 + r, **spec.lucb)
            res = quantile.run()
            # the sampling half of delta: the sample held no arm of the top rho
            entry["sample_miss"] = float(env.true_means[quantile.sample].max()
                                         < quantile_target(env.true_means, args.rho) - 1e-12)
        elif spec.kind == "pac":
            surrogate = NeuralSurrogate(world.queries, world.arm_emb, delta=args.delta,
                                        config=NeuralConfig(seed=args.seed + r, **surrogate_knobs))
            res = CertifiedTopM(env, surrogate, PacConfig(m=m, epsilon=epsilon, delta=args.delta,
                                                          cold_start=args.cold_start, max_pulls=args.budget, cs=args.cs,
                                                          stop=spec.stop, seed=args.seed * 1000 + r,
                                                          **spec.lucb)).run()
        else:
            if spec.kind == "linear":
                # GIFA's linear environment: the surrogate assumes its noise level, lambda = sigma / 20; elsewhere the
                # harness's CASE (or the named variant's sigma)
                reg = (noise / 20) ** 2 if linear else 1.0
                surrogate = LinearSurrogate(world.case_features, reg=reg, sigma=case_sigma, delta=args.delta,
                                            beta=args.beta)
            else:
                surrogate = NeuralSurrogate(world.queries, world.arm_emb, delta=args.delta,
                                            config=NeuralConfig(seed=args.seed + r, **surrogate_knobs))
            cfg = BanditConfig(m=m, challengers=args.challengers, epsilon=epsilon, delta=args.delta,
                               rule=spec.rule if spec.rule == "random" else args.rule,
                               cold_start="all" if linear else args.cold_start, max_pulls=args.budget,
                               seed=args.seed * 1000 + r, max_rounds=200_000 if linear else 10_000,
                               patience=patience)
            res = GapIndexTopM(env, surrogate, cfg).run()
        entry["seconds"] = time.perf_counter() - began
        truth = env.true_means
        entry.update(target=getattr(env, "target", "truth"), n_arms=env.n_arms)
        best = np.sort(truth)[::-1]
        if spec.kind == "quantile":  # its target: one arm within epsilon of the top rho fraction
            bar = quantile_target(truth, args.rho)
            entry["error"] = float(truth[res.top_m[0]] < bar)
            entry["eps_error"] = float(truth[res.top_m[0]] < bar - epsilon - 1e-12)
        else:
            entry["error"] = float(set(res.top_m) != set(np.argsort(-truth, kind="stable")[:m].tolist()))
            # (epsilon, delta)-PAC: every returned arm within epsilon of the true m-th best
            entry["eps_error"] = float(np.any(truth[res.top_m] < best[m - 1] - epsilon - 1e-12))
        entry["regret"] = true_simple_regret(truth, res.top_m)
        if getattr(env, "target", "") == "fixed set":  # the pool beside it, and the floor the fixed set sets there
            pool, oracle = env.pool_means, np.argsort(-truth, kind="stable")[:m]
            bar_pool = np.sort(pool)[::-1][m - 1] - epsilon - 1e-12
            entry["eps_error_pool"] = float(np.any(pool[res.top_m] < bar_pool))
            entry["oracle_floor_pool"] = float(np.any(pool[oracle] < bar_pool))
            entry["regret_pool"] = true_simple_regret(pool, res.top_m)
        entry["pulls"] = res.pulls
        entry["rounds"] = res.rounds
        if hasattr(env, "harness_calls"):
            entry["calls"] = env.harness_calls()
        if res.coverage is not None:
            entry["coverage"] = res.coverage
        if getattr(res, "event_held", None) is not None:
            entry["event"] = float(res.event_held)
        entry["stopped_by"] = res.stopped_by
        entry["machine"] = float_path()  # a seeded run repeats on its machine, not always on another (its floats)
        if r == 0:
            entry["trace"] = res.trace
        line = json.dumps(entry, default=_plain)  # serialised once: written, and read back as a resumed run reads it
        if args.checkpoint:
            with args.checkpoint.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        last = absorb(json.loads(line), per_run, stops, trace0)
    neural = dict(surrogate_knobs) if spec.kind in ("neural", "pac") else {}
    if spec.kind == "pac":
        neural["stop"] = spec.stop
    if spec.cs:  # a method with its own sequence (the run's --cs is in the env block)
        neural["cs"] = spec.cs
    neural.update(spec.lucb)
    if spec.kind == "model-free":
        neural.update(lucb_knobs(spec, args))
    if spec.kind == "linear":  # which CASE ran: the harness's, or the named variant
        neural.update(sigma=case_sigma, patience=patience)
    if spec.kind == "quantile":
        neural.update(rho=args.rho, m=1, arms_sampled=min(quantile_sample_size(args.rho, args.delta), last["n_arms"]))
    row = {"method": name, "simulated": not args.env.startswith("table:"), "runs": args.runs, "kind": spec.kind,
           "settings": neural, "delta": args.delta}
    for key, label in (("pulls", "mean_pulls"), ("error", "error_rate"), ("eps_error", "eps_error_rate"),
                       ("regret", "mean_simple_regret"), ("coverage", "coverage")):
        mean, se = mean_se(per_run[key]) if per_run[key] else (None, None)
        row[label], row[label.replace("mean_", "") + "_se"] = mean, se
    row["eps_error_ucb95"] = upper_bound95(per_run["eps_error"])
    if per_run["event"]:  # what the guarantee is about: runs whose event held at every round, and its 95% lower bound
        row.update(event_rate=float(np.mean(per_run["event"])), event_runs=len(per_run["event"]),
                   event_rate_lcb95=lower_bound95(per_run["event"]))
    if per_run["sample_miss"]:  # quantile-PAC's other half of delta
        row.update(sampling_miss_rate=float(np.mean(per_run["sample_miss"])),
                   sampling_miss_ucb95=upper_bound95(per_run["sample_miss"]))
    row["target"] = last["target"]  # what eps-error, regret and coverage are judged against: what the pulls estimate
    if per_run["eps_error_pool"]:  # a table's fixed set: the pool as a second target, with the protocol's floor
        row.update(eps_error_pool_rate=float(np.mean(per_run["eps_error_pool"])),
                   eps_error_pool_ucb95=upper_bound95(per_run["eps_error_pool"]),
                   oracle_floor_pool=float(np.mean(per_run["oracle_floor_pool"])),
                   mean_simple_regret_pool=float(np.mean(per_run["regret_pool"])))
    row["mean_rounds"], row["rounds_se"] = mean_se(per_run["rounds"])
    if per_run["calls"]:  # a table: what the pulls would cost the harness (repeats of deterministic answers: cached)
        row["mean_calls"], row["calls_se"] = mean_se(per_run["calls"])
        row["calls"] = per_run["calls"]
    row.update(pulls=per_run["pulls"], rounds=per_run["rounds"], simple_regrets=per_run["regret"], coverage_per_run=per_run["coverage"],
               stopped_by=stops, mean_seconds=float(np.mean(per_run["seconds"])))
    return row, trace0


# what a run's rows do not depend on: where they go and how they are shown, and which methods run
NOT_SETTINGS = {"methods", "out", "update", "plot", "scatter", "no_progress", "data_dir", "checkpoint"}
# the environment's keys known before any model loads (the rest once the world is built)
EARLY_KEYS = {"name", "m", "epsilon", "delta", "cs", "seed", "runs"}


def run_arguments(args) -> dict:
    """Every option a run's rows depend on, as given (JSON types): kept in env, so an --update can compare them."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(vars(args).items())
            if k not in NOT_SETTINGS and k != "neural_overrides"}


def updated_file(args, env_info: dict, keys: set) -> dict:
    """With --update, the results file to update, refused in one line unless it was run with these settings."""
    if not args.update:
        return {}
    if not (args.out and args.out.is_file()):
        raise ConfigError("--update needs --out naming an existing results file")
    try:
        earlier = json.loads(args.out.read_text())
        earlier_env = earlier["env"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"--update: {args.out} is not a bench simulate results file") from None
    differ = sorted(k for k in keys - {"arguments"} if earlier_env.get(k) != env_info.get(k))
    had, now = earlier_env.get("arguments"), env_info["arguments"]
    if had is not None:
        differ += sorted(f"--{k.replace('_', '-')}" for k in set(had) | set(now)
                         if k not in keys and had.get(k) != now.get(k))
    elif keys != EARLY_KEYS:  # said once, after the environment's check
        LOG.warning("--update: %s predates the options record (budget, challengers, ...): only its environment is "
                    "checked", args.out)
    if differ:
        raise ConfigError(f"--update: {args.out} was run with other settings ({', '.join(differ)}); rerun it whole")
    return earlier


def run(argv: list[str], encoder=None) -> dict:
    args = parser().parse_args(argv)
    args.neural_overrides = parse_neural(args.neural)
    linear = args.env == "linear"
    methods = parse_methods(args, linear)
    m = args.m or (2 if linear else 10)
    epsilon = args.epsilon if args.epsilon is not None else (0.0 if linear else 0.1)
    noise = args.noise if args.noise is not None else (0.5 if linear else 0.1)
    env_info: dict = {"name": args.env, "simulated": True, "m": m, "epsilon": epsilon, "delta": args.delta,
                      "noise": noise, "cs": args.cs, "seed": args.seed, "runs": args.runs,
                      "instances": "one per run" if args.env in FAMILIES else "one for all runs",
                      "arguments": run_arguments(args)}
    # the run's settings checked before any model loads, then the environment's once it is built
    earlier = updated_file(args, env_info, EARLY_KEYS)
    world_of = worlds(args, noise, env_info, encoder)
    earlier = updated_file(args, env_info, set(env_info) | set(earlier.get("env", {})))
    results, traces = [], {}
    for name in methods:
        row, traces[name] = run_method(name, args, world_of, m, epsilon, noise, linear)
        if env_info.get("truth_judges") is False:  # an estimated truth coarser than epsilon / 10
            row["judged"] = False
        results.append(row)
    out = {"env": env_info, "results": results, "traces": traces}
    if args.update:  # the earlier rows in their order, these methods' replaced, new ones after
        fresh = {r["method"]: r for r in results}
        kept = [fresh.pop(r["method"], r) for r in earlier["results"]]
        out = {"env": env_info, "results": kept + list(fresh.values()), "traces": {**earlier["traces"], **traces}}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2))
    if args.plot:
        from reports.plots import convergence_plot

        convergence_plot(traces, args.plot, title=f"SIMULATED {args.env} environment")
    if args.scatter:
        from reports.plots import pulls_vs_eps_error

        pulls_vs_eps_error({args.env: results}, args.scatter)
    return out
