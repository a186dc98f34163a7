"""The harness's own selectors fitted from a recorded reward table: zero LLM calls, as many seeds as wanted.

`python -m bench table replay FILE --methods case-static,dearicl-static,... --seeds 50` fits each selector
(`NAME:LABEL` runs one selector under its own --param settings, e.g. `dearicl-static:paper`)
through its real `fit` and `select`, with the table in the LLM's place:
- the arms are the table's (FitContext.arms), the same KMeans construction the bandits use;
- per seed, the selector sees --n-val items drawn (seeded) from the table's validation pool, as a run with --n-val
  does, and its own randomness follows the seed;
- a pull returns the recorded rewards (`TableOracle`): the i-th repeat of an (arm, item) its i-th recorded sample,
  cycling when a selector asks for more than the table holds; calls are counted and budgeted as the LLM's are;
- the test score of a selection is the table's metric on its test items (mean over the recorded samples), and its
  truth is exact: each arm's mean reward over the WHOLE validation pool.
Only selectors that choose among the arms can replay (the bandit and LTR families, EXPLORA); the others fail with
one line before anything is fitted. Method-level claims are made across seeds: each seed is one paired
observation, tested with Wilcoxon's signed-rank test (Holm over the comparisons) and, for "no difference", with an
equivalence test (TOST, paired t) against a margin fixed before the run (--margin); a difference both
significant and inside the margin is reported as such.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.errors import ConfigError, unknown_name
from bench.items import Item
from bench.log import LOG, Progress
from bench.oracle import Pull, RewardOracle
from bench.records import round_floats
from bench.reward_table import RewardTable, held_test_items, table_splits
from reports.stats import min_detectable_difference, tost_paired, verdict


class TableOracle(RewardOracle):
    """The reward oracle answered from a table: pulls of the table's arms on its validation items."""

    def __init__(self, values: np.ndarray, arm_of: dict[tuple, int], column_of: dict[str, int], task, method: str,
                 budget: int | None = None):
        super().__init__(None, task, method, bertscore=None, budget=budget)
        self.values, self.arm_of, self.column_of = values, arm_of, column_of  # values: [arms, items, samples]

    def child(self, budget: int | None) -> "TableOracle":
        kid = TableOracle(self.values, self.arm_of, self.column_of, self.task, self.scope.method, budget)
        kid.parent, kid.history = self, self.history
        return kid

    def pull(self, demos: Sequence[Item], items: Sequence[Item]) -> np.ndarray:
        demo_ids = tuple(d.id for d in demos)
        arm = self.arm_of.get(demo_ids)
        if arm is None:
            raise ConfigError(f"{self.scope.method} asked for demonstrations that are not one of the table's arms: "
                              "it cannot fit from a reward table")
        samples = self.values.shape[2]
        indices = [self._pulls_of[(demo_ids, it.id)] for it in items]
        # a deterministic table (one sample) answers a repeat from the cache, as the LLM client would
        self._charge([f"{arm}/{it.id}/{i if samples > 1 else 0}" for it, i in zip(items, indices)])
        rewards = np.array([self.values[arm, self.column_of[it.id], i % samples] for it, i in zip(items, indices)],
                           dtype=np.float64)
        self._answered()
        for it in items:
            self._pulls_of[(demo_ids, it.id)] += 1
        self.history.append(Pull(demo_ids, tuple(it.id for it in items), tuple(float(r) for r in rewards)))
        return rewards

    def loglik(self, contexts, continuations):
        raise ConfigError(f"{self.scope.method} scores log-likelihoods: a reward table cannot answer them")

    def generate(self, shown):
        raise ConfigError(f"{self.scope.method} generates text: a reward table cannot answer it")


def replayable(name: str) -> None:
    """One line, before anything is fitted, for a selector that does not choose among the arms."""
    from methods.bandit_base import BanditSelector
    from methods.base import available
    from methods.explora import Explora

    cls = available().get(name.split(":")[0])
    if cls is None:
        raise unknown_name("method", name, sorted(available()))
    if not issubclass(cls, (BanditSelector, Explora)):
        raise ConfigError(f"{name} does not choose among the table's arms (only the bandit and LTR selectors and "
                          "explora replay from a table)")


@dataclass
class Replay:
    table: RewardTable
    path: Path
    task: object
    pool: list[Item]
    validation: list[Item]  # the table's whole validation pool
    test: list[Item]
    arms: np.ndarray  # pool indices [arms, k]
    encoder: object

    @classmethod
    def load(cls, path: Path, data_dir: Path, encoder) -> "Replay":
        table = RewardTable.load(path)
        task, splits, arms = table_splits(table, data_dir, path)
        by_id = {it.id: it for it in splits.validation + splits.test}
        return cls(table, Path(path), task.configure(), splits.pool, [by_id[i] for i in table.item_ids[table.validation]],
                   [by_id[i] for i in table.item_ids[table.test]], arms, encoder)

    @cached_property
    def arm_of(self) -> dict[tuple, int]:
        return {tuple(row): a for a, row in enumerate(self.table.arm_demo_ids.tolist())}

    @cached_property
    def column_of(self) -> dict[str, int]:
        return {item_id: c for c, item_id in enumerate(self.table.item_ids.tolist())}

    @cached_property
    def expected_scores(self) -> dict[str, np.ndarray]:
        """Per test metric (the task's, and each secondary one the table holds), [arms, items]: each arm's expected
        score on each item (the mean over the recorded samples)."""
        table = self.table
        held = [name for name in table.columns if name != "rewards" and (name != "loglik" or "metric" not in table.columns)]
        return {name: table.item_scores(name) for name in held}  # a log-likelihood table's loglik is its only score

    def fit_and_score(self, name: str, params: dict, seed: int, n_val: int, reward: str, budget: int | None) -> dict:
        from methods.base import FitContext, create

        table, arm_of, column_of = self.table, self.arm_of, self.column_of
        values = table.values(reward)
        values = values[:, :, None] if values.ndim == 2 else values
        oracle = TableOracle(values, arm_of, column_of, self.task, name, budget)
        pick = np.sort(np.random.default_rng([seed, 2]).choice(len(self.validation), n_val, replace=False))
        ctx = FitContext(task=self.task, pool=self.pool, validation=[self.validation[i] for i in pick],
                         encoder=self.encoder, oracle=oracle, seed=seed, k=int(table.meta["k"]), budget=budget,
                         arms=self.arms)
        selector = create(name.split(":")[0], params)  # "NAME:LABEL": one selector under two settings
        began = time.perf_counter()
        selector.fit(ctx)
        fit_seconds = time.perf_counter() - began
        chosen = []
        for item in self.test:
            arm = arm_of.get(tuple(d.id for d in selector.select(item)))
            if arm is None:
                raise ConfigError(f"{name} chose demonstrations outside the table's arms for {item.id}")
            chosen.append(arm)
        cols = [column_of[it.id] for it in self.test]
        arms_used = sorted(set(chosen))  # truth: exact, the whole validation pool, every sample
        scores = {what: float(values[chosen, cols].mean()) for what, values in self.expected_scores.items()}
        agreement = surrogate_agreement(selector, arm_of, truth := table.true_means(reward))
        return {"method": name, "seed": seed, "test_score": scores.get("metric", float("nan")), "test_scores": scores,
                "chosen": chosen,  # the arm of each test item, in the table's test order: a bootstrap over items
                "arms_chosen": arms_used if len(arms_used) <= 10 else len(arms_used), "calls": oracle.calls, "fit_seconds": round(fit_seconds, 2),
                # the chosen arms' exact validation means against the best arm's (task level: one arm)
                "true_value": float(np.mean(truth[chosen])), "regret": max(0.0, float(truth.max() - np.mean(truth[chosen]))),
                "scale": selector.scale(), "warnings": list(getattr(selector, "warnings_", [])), **agreement}


def surrogate_agreement(selector, arm_of: dict[tuple, int], truth: np.ndarray) -> dict:
    """How well a fitted surrogate ranks the arms, against the table's exact truth: Spearman's correlation of its
    estimated means with the arms' true validation means, over the arms it never pulled (held out) and over all.
    Empty for a selector without a surrogate of arm means (lucb-static, explora)."""
    from scipy.stats import spearmanr

    surrogate, result = getattr(selector, "surrogate_", None), getattr(selector, "result_", None)
    if surrogate is None or not hasattr(surrogate, "means") or result is None:
        return {}
    n = len(arm_of)
    index = np.array([arm_of[tuple(d.id for d in selector.demos_of(a))] for a in range(n)])  # fit's arm -> table's
    estimates = np.asarray(surrogate.means(np.arange(n)))
    pulled = getattr(result, "pulled", None) or set(result.seen)  # a PAC run's `seen` is the arms it pulled
    held_out = np.array([a not in pulled for a in range(n)])
    def rho(a, b):  # None where either side is constant (an untrained network's flat estimates)
        return float(spearmanr(a, b).statistic) if np.ptp(a) > 0 and np.ptp(b) > 0 else None

    out = {"rank_corr_all": rho(estimates, truth[index])}
    if held_out.sum() > 2:
        out["rank_corr_held_out"] = rho(estimates[held_out], truth[index][held_out])
    return out


def test_score(row: dict, metric: str) -> float:
    """A replayed fit's test score on `metric` ("metric": the task's own)."""
    if metric == "metric":
        return row["test_score"]
    if metric not in row.get("test_scores", {}):
        raise ConfigError(f"a resumed row ({row['method']}, seed {row['seed']}) has no '{metric}' score: replay it "
                          "into a new --out folder")
    return row["test_scores"][metric]


def _mean_of(rows: dict, seeds: list[int], key: str) -> float | None:
    values = [rows[s][key] for s in seeds if rows[s].get(key) is not None and np.isfinite(rows[s][key])]
    return float(np.mean(values)) if values else None


def summarise(rows: list[dict], table: RewardTable, reward: str, baseline: str, margin: float,
              metric_name: str = "metric") -> dict:
    """Per method across seeds, and each method against the baseline: paired by seed."""
    from scipy import stats
    from bench.multiple_testing import holm_adjusted

    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {m: {r["seed"]: r for r in rows if r["method"] == m} for m in methods}
    test_cols = table.test
    metric = table.item_scores(metric_name)[:, test_cols].mean(axis=1)
    truth = table.true_means(reward)
    # the arms' own test scores: what choosing well or badly can reach
    summary = {"reference": {"truth_best_arm": float(metric[int(np.argmax(truth))]), "mean_arm": float(metric.mean()),
                             "best_arm": float(metric.max()), "arms_sd": float(metric.std(ddof=1))},
               "methods": [], "comparisons": []}
    for m in methods:
        seeds = sorted(by[m])
        score = np.array([test_score(by[m][s], metric_name) for s in seeds])
        half = stats.t.ppf(0.975, len(score) - 1) * score.std(ddof=1) / np.sqrt(len(score)) if len(score) > 1 else np.nan
        pulls = [by[m][s]["scale"].get("pulls", by[m][s]["scale"].get("subsets evaluated", np.nan)) for s in seeds]
        rounds = [by[m][s]["scale"].get("rounds", by[m][s]["scale"].get("iterations", np.nan)) for s in seeds]
        summary["methods"].append({
            "method": m, "seeds": len(seeds), "test_score": float(score.mean()), "ci95": [float(score.mean() - half),
                                                                                     float(score.mean() + half)],
            "sd": float(score.std(ddof=1)) if len(score) > 1 else None,
            "calls": float(np.mean([by[m][s]["calls"] for s in seeds])),
            "pulls": float(np.nanmean(pulls)), "rounds": float(np.nanmean(rounds)),
            "regret": float(np.mean([by[m][s]["regret"] for s in seeds])),
            "fit_seconds": float(np.mean([by[m][s]["fit_seconds"] for s in seeds])),
            # the surrogate's ranking of the arms it never pulled, against the exact truth (None: no surrogate)
            "rank_corr_held_out": _mean_of(by[m], seeds, "rank_corr_held_out")})
    others = [m for m in methods if m != baseline]
    raw, raw_tost = [], []
    alpha_holm = 0.05 / max(1, len(others))  # Holm's first, strictest step: the level every comparison may face
    for m in others:
        seeds = sorted(set(by[m]) & set(by[baseline]))
        diff = np.array([test_score(by[m][s], metric_name) - test_score(by[baseline][s], metric_name) for s in seeds])
        p = float(stats.wilcoxon(diff).pvalue) if len(diff) > 1 and np.any(diff != 0) else 1.0
        a = np.array([test_score(by[m][s], metric_name) for s in seeds])
        b = np.array([test_score(by[baseline][s], metric_name) for s in seeds])
        tost = tost_paired(a, b, margin)
        raw.append(p)
        raw_tost.append(tost)
        sd = float(diff.std(ddof=1)) if len(diff) > 1 else float("nan")
        summary["comparisons"].append({"method": m, "baseline": baseline, "seeds": len(seeds),
                                       "mean_difference": float(diff.mean()), "p_wilcoxon": p, "margin": margin,
                                       "p_tost": tost, "sd_difference": sd, "alpha_holm": alpha_holm,
                                       # the smallest true difference this many seeds detect (80% power, paired t)
                                       "mdd": min_detectable_difference(sd, len(diff), alpha=alpha_holm)})
    if raw:
        # both families Holm-adjusted: "equivalent" is a claim about every method at once, as "differs" is
        for row, p_holm, tost_holm in zip(summary["comparisons"], holm_adjusted(raw),
                                          holm_adjusted(raw_tost)):
            row["p_holm"], row["p_tost_holm"] = float(p_holm), float(tost_holm)
            row["verdict"] = verdict(p_holm, tost_holm)
        primary_tests(summary, by, baseline, others, table, metric_name, margin, alpha_holm)
    return summary


# the analysis plan's equivalence margins (studies/tables/ANALYSIS_PLAN.md), by the test score's column
PLAN_MARGINS = {"metric": 0.05, "option_correct": 0.05, "chrf": 0.02, "loglik": 0.02}
SUMMARY_DIGITS = 12  # summary.json's floats: far below any printed figure, above the last-bit noise of vector sums


def primary_tests(summary: dict, by: dict, baseline: str, others: list[str], table: RewardTable, metric_name: str,
                  margin: float, alpha_holm: float) -> None:
    """The plan's primary test of each comparison, written into it as `primary`: a two-way bootstrap over seeds and
    test items of the per-item scores (the rows' arm per test item), Holm over the comparisons, the plan's verdict.
    The Wilcoxon test over seeds stays beside it, secondary. Rows without per-item arms (replayed before they were
    kept) leave it out."""
    from reports.stats import bootstrap_seeds_items, planned_verdict
    from bench.multiple_testing import holm_adjusted

    scores = table.item_scores(metric_name)[:, table.test]  # [arms, test items]
    cols = np.arange(scores.shape[1])
    got = []
    for m in others:
        seeds = sorted(set(by[m]) & set(by[baseline]))
        if not all("chosen" in by[x][s] for x in (m, baseline) for s in seeds):
            return
        per_item = lambda x: np.array([scores[by[x][s]["chosen"], cols] for s in seeds])  # noqa: E731
        got.append(bootstrap_seeds_items(per_item(m), per_item(baseline), margin, alpha=alpha_holm))
    p_holm = holm_adjusted([g["p"] for g in got])
    p_tost_holm = holm_adjusted([g["p_tost"] for g in got])
    for row, g, ph, pth in zip(summary["comparisons"], got, p_holm, p_tost_holm):
        row["primary"] = {"test": "two-way bootstrap over seeds and test items (10,000 resamples)", **g,
                          "p_holm": float(ph), "p_tost_holm": float(pth), "margin": margin,
                          "verdict": planned_verdict(float(ph), float(pth), margin, g["mdd"])}


def render(summary: dict, meta: dict, n_val: int, reward: str, metric_name: str = "metric") -> str:
    from tabulate import tabulate

    ref = summary["reference"]
    lines = [f"RECORDED rewards replayed (no LLM call): task {meta['task']}, model {meta['model']}, {meta['n_arms']} "
             f"arms of k={meta['k']}, {n_val} validation items a pull (of {meta['n_validation']}), "
             f"{held_test_items(meta)}; reward '{reward}', test score '{metric_name if metric_name != 'metric' else meta.get('metric', 'metric')}'. Arms' test scores: mean {ref['mean_arm']:.3f}, best {ref['best_arm']:.3f} "
             f"(sd {ref['arms_sd']:.3f}); the arm best on the validation truth scores {ref['truth_best_arm']:.3f}.", ""]
    rows = [[m["method"], m["seeds"], f"{m['test_score']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]",
             f"{m['regret']:.3f}", f"{m['pulls']:.1f}", f"{m['rounds']:.1f}", f"{m['calls']:.0f}",
             f"{m['fit_seconds']:.1f}",
             "" if m.get("rank_corr_held_out") is None else f"{m['rank_corr_held_out']:+.2f}"] for m in summary["methods"]]
    lines.append(tabulate(rows, ["method", "seeds", "test score [95% CI]", "regret (truth)", "pulls", "rounds",
                                 "calls", "fit s", "surrogate's rank corr. (held-out arms)"], tablefmt="github",
                          disable_numparse=True))
    if summary["comparisons"]:
        rows = [[c["method"], c["baseline"], f"{c['mean_difference']:+.4f}", f"{c['p_wilcoxon']:.3g}",
                 f"{c['p_holm']:.3g}", f"±{c['margin']:g}", f"{c['p_tost']:.3g}", f"{c['p_tost_holm']:.3g}",
                 "" if not np.isfinite(c.get("mdd", np.nan)) else f"{c['mdd']:.4f}", c["verdict"]]
                for c in summary["comparisons"]]
        alpha = summary["comparisons"][0].get("alpha_holm", 0.05)
        lines += ["", tabulate(rows, ["method", "vs", "mean Δ (paired by seed)", "p (Wilcoxon)", "p (Holm)",
                                      "margin", "p (TOST)", "p (TOST, Holm)", f"MDD (α {alpha:.3g}, 80% power)",
                                      "verdict"], tablefmt="github", disable_numparse=True),
                  "", "The margin is fixed before the run (--margin); a verdict rests on the Holm-adjusted p-values; "
                      "MDD: the smallest true mean difference a paired t-test over these seeds detects with 80% "
                      "power at Holm's strictest level."]
    return "\n".join(lines)


def fit_settings(params: dict, n_val: int, reward: str, budget: int | None) -> dict:
    """What a fit depends on beyond its method and seed: a resumed row must have been made with the same."""
    # as a saved row reads back (tuples become lists), so a resume compares like with like
    return json.loads(json.dumps({"n_val": n_val, "reward": reward, "budget": budget,
                                  "params": {k: params[k] for k in sorted(params)}}))


def refuse_other_settings(rows: list[dict], out: Path, methods: list[str], params: dict, n_val: int, reward: str,
                          budget: int | None) -> None:
    """A resume that would mix fits made under other settings is refused in one line, the folder left untouched."""
    for row in rows:
        if row["method"] not in methods:
            continue  # a method not asked for now is kept on disk and left out of the summary
        want = fit_settings(params.get(row["method"], {}), n_val, reward, budget)
        # rows saved before settings were kept say their items a pull in their scale, and nothing else
        had = row.get("settings") or {"n_val": row.get("scale", {}).get("validation items a pull", n_val)}
        differ = [f"{key} {had[key]!r} (now {want[key]!r})" for key in had if had[key] != want[key]]
        if differ:
            raise ConfigError(f"{out / 'rows.jsonl'} holds fits of {row['method']} made with {', '.join(differ)}: "
                              f"give another --out, or move that folder aside, to replay under these settings")


def run(path: Path, methods: list[str], params: dict, seeds: list[int], n_val: int, reward: str,
        budget: int | None, baseline: str | None, margin: float, data_dir: Path, out: Path | None,
        progress: bool = True, metric_name: str = "metric") -> dict:
    from bench.encoder import Encoder

    from methods.base import create

    for name in methods:
        replayable(name)  # before the table or the encoder loads
        create(name.split(":")[0], params.get(name, {}))  # parameter names and values, checked now
    if set(params) - set(methods):
        raise ConfigError(f"--param names {', '.join(sorted(set(params) - set(methods)))}, not among --methods")
    if margin is not None and margin <= 0:
        raise ConfigError(f"--margin must be > 0, got {margin}")
    replay = Replay.load(path, data_dir, Encoder())
    reward = replay.table.default_reward if reward == "auto" else reward
    default_metric = metric_name == "auto"  # its summary is summary.json; another metric's is summary-NAME.json
    if metric_name == "auto":  # the task's metric where recorded, else what a pull returns
        metric_name = "metric" if "metric" in replay.table.columns else reward
    replay.table.values(reward), replay.table.values(metric_name)  # a column the table lacks fails before any fit
    if not 1 <= n_val <= len(replay.validation):
        raise ConfigError(f"--n-val must be 1..{len(replay.validation)} (the table's validation pool), got {n_val}")
    rows = []
    if out is not None and (out / "rows.jsonl").is_file():  # resume: seeds already replayed are kept
        rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()]
        refuse_other_settings(rows, out, methods, params, n_val, reward, budget)
    done = {(r["method"], r["seed"]) for r in rows}
    todo = [(m, s) for m in methods for s in seeds if (m, s) not in done]
    bar = Progress(len(todo), f"replay {replay.table.meta['task']}", progress, unit="fits")
    try:
        for name, seed in todo:
            row = replay.fit_and_score(name, params.get(name, {}), seed, n_val, reward, budget)
            row["settings"] = fit_settings(params.get(name, {}), n_val, reward, budget)
            rows.append(row)
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                with open(out / "rows.jsonl", "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            bar.update(1)
    finally:
        bar.close()
    rows = [r for r in rows if r["method"] in methods and r["seed"] in seeds]
    if margin is None:  # the plan's: by the test score's column; a task metric that is a BERTScore takes chrF's
        bertscore = metric_name == "metric" and "bertscore" in replay.table.meta.get("metric", "")
        margin = 0.02 if bertscore else PLAN_MARGINS.get(metric_name, 0.05)
    summary = summarise(rows, replay.table, reward, baseline or methods[0], margin, metric_name)
    result = {"table": str(path), "meta": replay.table.meta, "n_val": n_val, "reward": reward,
              "test_metric": metric_name, "seeds": seeds,
              "recorded": True, "simulated": False, **summary}
    text = render(summary, replay.table.meta, n_val, reward, metric_name)
    if out is not None:
        suffix = "" if default_metric or metric_name == "metric" else f"-{metric_name}"  # the same fits, scored otherwise
        (out / f"summary{suffix}.json").write_text(json.dumps(round_floats(result, SUMMARY_DIGITS), indent=1))
        (out / f"summary{suffix}.md").write_text(text + "\n")
    LOG.info("replayed %d fits from %s", len(todo), path)
    print(text)
    return result
