"""The study's claims computed from its run folders: paired tests per seed, a seed-level test across seeds, TOST
against a fixed margin and the minimal detectable difference at the Holm-adjusted level, rendered as markdown blocks
that the results page and the READMEs embed between `<!-- claims:NAME -->` and `<!-- /claims -->`.

    python -m reports.claims studies/embedded-2026-11 --check docs/reports.md studies/embedded-2026-11/README.md
    python -m reports.claims studies/embedded-2026-11 --write docs/reports.md ...   # after the data changed

`--check` exits 1 naming every block whose text no longer matches what the run folders give, so a number typed into a
block by hand, or a run folder changed under it, fails the test suite (tests/test_claims.py).

Rules, fixed here and not per result:
- WMT19 is read by chrF first (its BERTScore encoder, all-MiniLM-L6-v2, maps ~65% of the references' Chinese
  characters to [UNK]); BERTScore F1 stands beside it.
- Margins of equivalence (MARGINS): ±2 points of chrF or BERTScore, ±5 points of EM. They were fixed on 2026-11-27,
  after the study's runs and before this analysis of them; the reward-table studies' ±0.02 was fixed before their
  runs. They are not tuned to any result here.
- A method-level claim across seeds rests on the seed-level test (each seed one paired observation: the two prompts'
  mean scores on that seed's test items), never on the per-seed tests, which compare two prompts each.
- An item-level comparison of a 0/1 metric is decided by the exact McNemar test; the paired t-test otherwise.
- "equivalent" needs the TOST's p (Holm-adjusted over the family, like the difference tests) under 0.05.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import stats
from bench.multiple_testing import holm_adjusted

from reports.stats import PairedTTest, min_detectable_difference, planned_verdict, tost_paired

MARGINS = {"chrf": 0.02, "bertscore_f1": 0.02, "exact_match": 0.05}
PRIMARY = {"wmt19": ("chrf", "bertscore_f1"), "gsm8k": ("exact_match",), "aquarat": ("exact_match",)}
LABELS = {"chrf": "chrF", "bertscore_f1": "BERTScore", "exact_match": "EM"}
TASK_NAMES = {"wmt19": "WMT19", "aquarat": "AquaRAT", "gsm8k": "GSM8K"}
ALPHA = 0.05
# The paper's WMT19 BERTScore (Llama 3.2 3B): Table 1 (dearicl_paper.tex l.670-700) and, for the LTR rankers on
# DEARICL's data, its data-ablation table (l.876-881). Cited for direction: another model, encoder and scale.
PAPER_WMT19 = {"zero-shot": 51.22, "few-shot": 61.64, "lens": 64.09, "explora": 66.26, "bridge": 64.96,
               "case-static": 65.40, "dearicl-static": 68.83, "knn": 68.36, "mmr": 68.86, "pirank": 71.30,
               "neuralndcg": 71.13, "listnet": 71.26, "udr": 71.22, "ndcgloss2pp": 72.56, "neuralndcg-norm": 71.80,
               "case-dynamic": 71.70, "dearicl-dynamic": 78.89, "dearicl-noexplore": 71.30, "dearicl-random": 70.38,
               "ndcgloss2pp@dearicl-data": 74.06, "neuralndcg@dearicl-data": 72.75,
               "neuralndcg-norm@dearicl-data": 72.97, "udr@dearicl-data": 72.65, "listnet@dearicl-data": 73.64}
BLOCK = re.compile(r"(<!-- claims:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /claims -->)", re.S)


# ---- data ----------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _run_records(folder: Path) -> tuple[dict, tuple[dict, ...]]:
    """A run folder's results.json and records, read once however many cells and metrics ask."""
    with (folder / "records.jsonl").open() as fh:
        return json.loads((folder / "results.json").read_text()), tuple(json.loads(line) for line in fh)


def item_scores(folder: Path, method: str, task: str, metric: str) -> dict[str, float]:
    """Each test item's score of one (method, task) cell under `metric`: the record's score where the run scored by
    that metric (results.json says which), else its secondary metric of that name."""
    results, records = _run_records(Path(folder))
    row = next(r for r in results["runs"] if r["method"] == method and r["task"] == task)
    out = {rec["item_id"]: rec["score"] if row["metric"] == metric else rec["extra"][metric]
           for rec in records if rec["method"] == method and rec["task"] == task}
    if not out:
        raise ValueError(f"{folder.name}: no records of {method} on {task}")
    return out


def compare_items(method_scores: dict[str, float], base_scores: dict[str, float], margin: float,
                  alpha: float = ALPHA) -> dict:
    """One prompt against another on the same items: difference, the deciding p (McNemar for 0/1), TOST, MDD at
    `alpha` (80% power)."""
    common = sorted(set(method_scores) & set(base_scores))
    a = np.array([method_scores[i] for i in common])
    b = np.array([base_scores[i] for i in common])
    test = PairedTTest.of(dict(zip(common, a)), dict(zip(common, b)))
    sd = float(np.std(a - b, ddof=1)) if len(common) > 1 else math.nan
    return {"n": len(common), "method": float(a.mean()), "base": float(b.mean()), "diff": float((a - b).mean()),
            "p": test.deciding_p(), "mcnemar": test.mcnemar_p is not None, "p_tost": tost_paired(a, b, margin),
            "mdd": min_detectable_difference(sd, len(common), alpha=alpha)}


def seed_level(method_means: list[float], base_means: list[float], margin: float) -> dict:
    """Across seeds, each seed one paired observation: paired t-test and TOST on the seeds' mean scores."""
    a, b = np.array(method_means), np.array(base_means)
    diff = a - b
    p = float(stats.ttest_rel(a, b).pvalue) if len(diff) > 1 and np.std(diff) > 0 else math.nan
    sd = float(np.std(diff, ddof=1)) if len(diff) > 1 else math.nan
    p_tost = tost_paired(a, b, margin)
    return {"seeds": len(diff), "diff": float(diff.mean()), "sd": sd, "p": p, "p_tost": p_tost,
            "mdd": (mdd := min_detectable_difference(sd, len(diff))), "verdict": planned_verdict(p, p_tost, margin, mdd)}


# ---- blocks --------------------------------------------------------------------------------------------------------
def _x(value: float, digits: int = 2) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.{digits}f}"


def _d(value: float, digits: int = 2) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:+.{digits}f}"


def _p(value: float) -> str:
    return "–" if value is None or math.isnan(value) else (f"{value:.2g}" if value < 0.001 else f"{value:.3f}")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def pair_block(study: Path, part: str, method: str, base: str, tasks=("wmt19", "aquarat", "gsm8k"),
               base_part: str | None = None, labels: tuple[str, str] | None = None) -> str:
    """`method` against `base` per task: each seed's paired item-level test, then the seed-level test across seeds,
    for each metric of the task (primary first)."""
    rows, seed_rows = [], []
    for task in tasks:
        folders = sorted(study.glob(f"{part}-{task}-seed*"), key=lambda p: int(p.name.rsplit("seed", 1)[1]))
        for metric in PRIMARY[task]:
            margin = MARGINS[metric]
            per_seed = []
            for folder in folders:
                seed = folder.name.rsplit("seed", 1)[1]
                base_folder = study / f"{base_part}-{task}-seed{seed}" if base_part else folder
                c = compare_items(item_scores(folder, method, task, metric),
                                  item_scores(base_folder, base, task, metric), margin)
                per_seed.append(c)
                rows.append([TASK_NAMES[task], LABELS[metric], seed, str(c["n"]), _x(c["base"]), _x(c["method"]),
                             _d(c["diff"]), _p(c["p"]) + (" (McNemar)" if c["mcnemar"] else ""), _p(c["p_tost"]),
                             _x(c["mdd"], 1)])
            s = seed_level([c["method"] for c in per_seed], [c["base"] for c in per_seed], margin)
            seed_rows.append([TASK_NAMES[task], LABELS[metric], str(s["seeds"]),
                              f"{_d(s['diff'])} ± {_x(s['sd'])}", _p(s["p"]), f"±{100 * margin:g}", _p(s["p_tost"]),
                              _x(s["mdd"], 1), s["verdict"]])
    base_label, method_label = labels or (base, method)
    per_seed_table = _table(["task", "metric ×100", "seed", "n", base_label, method_label, "Δ", "p", "p (TOST)",
                             "MDD (80% power)"], rows)
    seed_table = _table(["task", "metric ×100", "seeds", "Δ mean ± sd over seeds", "p (paired t over seeds)",
                         "margin", "p (TOST over seeds)", "MDD over seeds", "verdict"], seed_rows)
    verdicts: dict[str, list[str]] = {}
    for row in seed_rows:  # the method-level verdicts in words: the sentence a page would otherwise write by hand
        verdicts.setdefault(row[-1], []).append(f"{row[0]} {row[1]}")
    said = "; ".join(f"{verdict}: {', '.join(cells)}" for verdict, cells in verdicts.items())
    return (f"Per seed (two prompts on the same test items; α 0.05):\n\n{per_seed_table}\n\n"
            f"Across seeds (each seed one paired observation; the method-level claim):\n\n{seed_table}\n\n"
            f"`{method_label}` against `{base_label}` across seeds, {said}.\n")


def rq2_block(study: Path, folder: str = "rq2-wmt19-seed0", base: str = "case-dynamic", task: str = "wmt19") -> str:
    """Every selector of one run against `base` on the same items, for each metric (chrF first): Holm over the
    family for the difference and for the TOST, MDD at Holm's strictest level α/m."""
    run = study / folder
    methods = [r["method"] for r in json.loads((run / "results.json").read_text())["runs"] if r.get("score") is not None]
    others = [m for m in methods if m != base]
    alpha_m = ALPHA / len(others)
    cols, per_metric = [], {}
    for metric in PRIMARY[task]:
        margin = MARGINS[metric]
        base_scores = item_scores(run, base, task, metric)
        got = {m: compare_items(item_scores(run, m, task, metric), base_scores, margin, alpha=alpha_m) for m in others}
        holm = dict(zip(others, holm_adjusted([got[m]["p"] for m in others])))
        holm_tost = dict(zip(others, holm_adjusted([got[m]["p_tost"] for m in others])))
        per_metric[metric] = (got, holm, holm_tost, base_scores)
        cols.append(metric)
    primary = cols[0]
    rows = []
    for m in methods:
        row = [f"`{m}`"]
        for metric in cols:
            got, holm, holm_tost, base_scores = per_metric[metric]
            tail = 2 if metric == primary else 0  # the primary metric also gets its MDD and the verdict
            if m == base:
                row += [_x(float(np.mean(list(base_scores.values())))), "baseline", "", ""] + [""] * tail
                continue
            c = got[m]
            row += [_x(c["method"]), _d(c["diff"]), _p(holm[m]), _p(holm_tost[m])]
            row += [_x(c["mdd"]), planned_verdict(holm[m], holm_tost[m], MARGINS[metric], c["mdd"])][:tail]
        rows.append(row + [f"{PAPER_WMT19[m]:.2f}" if m in PAPER_WMT19 else "–"])
    headers = ["selector"]
    for metric in cols:
        label = LABELS[metric]
        headers += [f"{label} ×100", f"Δ {label}", "p (Holm)", f"p (TOST ±{100 * MARGINS[metric]:g}, Holm)"]
        if metric == primary:
            headers += [f"MDD {label} (α 0.05/{len(others)})", f"verdict ({label})"]
    headers.append("paper: BERTScore (Llama 3.2 3B)")
    text = (f"{TASK_NAMES[task]}, `{folder}`, n = {per_metric[primary][0][others[0]]['n']} test items, every selector "
            f"against `{base}`; Holm over the {len(others)} comparisons:\n\n{_table(headers, rows)}\n")
    said = []
    for metric in cols:  # what the tests decide, in words, so that no sentence beside the table restates it by hand
        got, holm, holm_tost, _ = per_metric[metric]
        better = [f"`{m}`" for m in others if holm[m] < ALPHA and got[m]["diff"] > 0]
        worse = [f"`{m}`" for m in others if holm[m] < ALPHA and got[m]["diff"] < 0]
        # "equivalent" needs a margin the design can reach (ANALYSIS_PLAN.md): the TOST alone is not enough
        same = [f"`{m}`" for m in others if holm_tost[m] < ALPHA and MARGINS[metric] >= got[m]["mdd"]]
        unreachable = [f"`{m}`" for m in others if holm[m] >= ALPHA and not MARGINS[metric] >= got[m]["mdd"]]
        said.append(f"{LABELS[metric]}: better than `{base}` {', '.join(better) or 'none'}; worse "
                    f"{', '.join(worse) or 'none'}; equivalent within ±{100 * MARGINS[metric]:g} "
                    f"{', '.join(same) or 'none'}" + (f"; cannot decide (the margin ±{100 * MARGINS[metric]:g} is "
                                                      f"below the MDD) {', '.join(unreachable)}" if unreachable else ""))
    text += "\nAfter Holm's correction, " + "; ".join(said) + ".\n"
    if "dearicl-dynamic" in others and base == "case-dynamic":  # the paper's cost direction, from the run's own rows
        row = {r["method"]: r for r in json.loads((run / "results.json").read_text())["runs"]}
        case, dear = row[base], row["dearicl-dynamic"]
        text += (f"\nCost: `{base}` asked {case['llm_calls_requested']['selection']} selection calls "
                 f"({case['llm_calls']['selection']} distinct with one shared cache) and took "
                 f"{case['inference_seconds_per_query']:.1f} s a test query; `dearicl-dynamic` "
                 f"{dear['llm_calls']['selection']} selection calls and {dear['inference_seconds_per_query']:.1f} s a "
                 "query.\n")
    if "dearicl-dynamic" in others and base in PAPER_WMT19:
        text += "\n" + paper_gain_line(run, task, base)
    return text


def paper_gain_line(run: Path, task: str, base: str, method: str = "dearicl-dynamic") -> str:
    """The paper's headline gain, rescaled to this run (its relative gain times the baseline's score here), tested
    one-sided against the observed BERTScore differences, with the 95% interval of the difference."""
    relative = PAPER_WMT19[method] / PAPER_WMT19[base] - 1
    a, b = item_scores(run, method, task, "bertscore_f1"), item_scores(run, base, task, "bertscore_f1")
    diff = np.array([a[i] - b[i] for i in sorted(set(a) & set(b))])
    gain = relative * float(np.mean(list(b.values())))
    se = diff.std(ddof=1) / math.sqrt(len(diff))
    low, high = stats.t.interval(0.95, len(diff) - 1, diff.mean(), se)
    p = float(stats.t.cdf((diff.mean() - gain) / se, len(diff) - 1))
    return (f"`{method}` − `{base}`, BERTScore ×100: {_d(float(diff.mean()))}, 95% CI [{_d(low)}, {_d(high)}]. The "
            f"paper's gain ({PAPER_WMT19[method]:.2f} vs {PAPER_WMT19[base]:.2f}, {100 * relative:+.1f}% relative) "
            f"would be {_d(gain)} here; one-sided p that the true difference is that large: {_p(p)}.\n")


def calls_block(study: Path, part: str = "rq1", methods: tuple[str, ...] = ("case-static", "dearicl-static"),
                ratio: bool = True) -> str:
    """Per task and bandit selector: rounds, pulls, selection calls, stop reasons and the final gap index (or
    certificate bound) of each seed; with `ratio`, how many times fewer calls the second made than the first (a
    lower bound where the first stopped at its call cap), and the paper's calls and rounds."""
    from bench.records import read_fits
    from reports.results import load_results
    from reports.study import PAPER_CALLS, PAPER_ROUNDS, convergence_rows, replay_sources

    runs = sorted(study.glob("*-seed*"))  # every part: a replayed fit's cost is its source's, maybe in another part
    loaded = {run: load_results(run) for run in runs}
    fits = {run: read_fits(run / "fits.jsonl") for run in runs}
    got = {(r["task"], r["method"], r["seed"]): r for r in convergence_rows(loaded, fits, replay_sources(loaded, fits))
           if r["part"] == part}
    rows = []
    for task in ("wmt19", "aquarat", "gsm8k"):
        seeds = sorted({seed for t, _, seed in got if t == task})
        for m in methods:
            cells = [got[(task, m, seed)] for seed in seeds]
            stops = ", ".join(f"{k} {sum(c['stopped_by'] == k for c in cells)}"
                              for k in dict.fromkeys(c["stopped_by"] for c in cells))
            final_b = ", ".join(f"{final_gap(study / (c['replayed_from'] or c['folder']), m, task):.3g}"
                                for c in cells)
            row = [TASK_NAMES[task], f"`{m}`", ", ".join(map(str, seeds)), ", ".join(str(c["rounds"]) for c in cells),
                   ", ".join(str(c["pulls"]) for c in cells), ", ".join(str(c["selection_calls"]) for c in cells),
                   stops, final_b]
            if ratio:
                first = methods[0]
                times = ", ".join(
                    f"{got[(task, first, seed)]['selection_calls'] / c['selection_calls']:.1f}×"
                    + (" (≥: cap)" if got[(task, first, seed)]["stopped_by"] == "budget" else "")
                    for seed, c in zip(seeds, cells)) if m != first else ""
                row += [times, f"{PAPER_CALLS.get((m, task), '–')} / {PAPER_ROUNDS.get((m, task), '–')}"]
            rows.append(row)
    headers = ["task", "selector", "seeds", "rounds", "pulls", "selection calls", "stopped by",
               "final B_t (gap index or certificate bound)"]
    if ratio:
        headers += [f"{methods[0]} calls / these", "paper: calls / rounds"]
    return _table(headers, rows) + "\n"


def final_gap(folder: Path, method: str, task: str) -> float:
    """The gap index B_t of a bandit fit's last round (its fits.jsonl trace)."""
    from bench.records import read_fits

    trace = read_fits(folder / "fits.jsonl")[(method, task)].trace
    return next(r["gap_index"] for r in reversed(trace) if r.get("gap_index") is not None)


def sensitivity_block(study: Path, task: str = "wmt19", reference: str = "rq2-wmt19-seed0") -> str:
    """The sensitivity runs (the first 50 of RQ2's test items) against RQ2's row of the same selector on the same
    items: `case-dynamic` at 5, 10 and 20 pulls a query against 13, and the LTR rankers over every arm against
    DEARICL's shortlist; Holm within each family, for the difference and for the TOST."""
    families = [("`case-dynamic`, pulls a query", [(f"{n}" + (" (cold start only)" if n == 5 else ""),
                                                     f"sens-{task}-case-dynamic-{n}", "case-dynamic")
                                                    for n in (5, 10, 20)]),
                ("LTR ranker over every arm (own data)", [(f"`{m}`", f"sens-{task}-ltr-all", m)
                                                          for m in ("pirank", "neuralndcg", "listnet", "ndcgloss2pp")])]
    out = []
    for title, members in families:
        rows, results = [], {}
        for metric in PRIMARY[task]:
            margin = MARGINS[metric]
            got = [compare_items(item_scores(study / folder, m, task, metric),
                                 item_scores(study / reference, m, task, metric), margin) for _, folder, m in members]
            holm = holm_adjusted([g["p"] for g in got])
            holm_tost = holm_adjusted([g["p_tost"] for g in got])
            results[metric] = list(zip(got, holm, holm_tost))
        for i, (label, _, _) in enumerate(members):
            row = [label]
            for metric in PRIMARY[task]:
                g, h, ht = results[metric][i]
                row += [_x(g["method"]), _x(g["base"]), _d(g["diff"]), _p(h), _p(ht), _x(g["mdd"], 1)]
            g, h, ht = results[PRIMARY[task][0]][i]
            row.append(planned_verdict(h, ht, MARGINS[PRIMARY[task][0]], g["mdd"]))
            rows.append(row)
        headers = [title]
        for metric in PRIMARY[task]:
            label = LABELS[metric]
            headers += [f"{label} ×100", "RQ2's, same items", f"Δ {label}", "p (Holm)",
                        f"p (TOST ±{100 * MARGINS[metric]:g}, Holm)", "MDD"]
        headers.append(f"verdict ({LABELS[PRIMARY[task][0]]})")
        out.append(_table(headers, rows))
    n = compare_items(item_scores(study / families[0][1][0][1], "case-dynamic", task, PRIMARY[task][0]),
                      item_scores(study / reference, "case-dynamic", task, PRIMARY[task][0]), 0.02)["n"]
    return (f"Against RQ2's row of the same selector on the same {n} test items (`{reference}`; RQ2's "
            "`case-dynamic` ran 13 pulls a query):\n\n" + "\n\n".join(out) + "\n")


REPLAY_LABELS = {"dearicl-static:paper": "`dearicl-static`, every setting the paper states",
                 "dearicl-static": "`dearicl-static`, harness schedule (4 epochs, lr 1e-3)"}


def replay_block(folder: Path) -> str:
    """A reward-table study's selectors (`bench table replay`'s summary.json, and summary-chrf.json where the table
    has chrF, which then decides): test score, regret against the exact truth, cost, the surrogate's ranking of
    the arms it never pulled, and each against the baseline across seeds."""
    replay = folder / "replay"
    main = json.loads((replay / "summary.json").read_text())
    second = json.loads((replay / "summary-chrf.json").read_text()) if (replay / "summary-chrf.json").is_file() else None
    decide = second or main  # the metric the verdicts rest on
    by = {c["method"]: c for c in decide["comparisons"]}
    scores2 = {m["method"]: m for m in second["methods"]} if second else {}
    rows = []
    for m in main["methods"]:
        name = m["method"]
        label = REPLAY_LABELS.get(name, f"`{name}`")
        if name == "dearicl-static:paper" and main["n_val"] == 10:  # the earlier protocol: Algorithm 1's schedule only
            label = "`dearicl-static`, paper schedule (1 epoch, lr 1e-4)"
        row = [label, f"{m['test_score']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]"]
        if second:
            c2 = scores2[name]
            row.append(f"{c2['test_score']:.3f} [{c2['ci95'][0]:.3f}, {c2['ci95'][1]:.3f}]")
        row += [f"{m['regret']:.3f}", f"{m['pulls']:.0f}", f"{m['rounds']:.0f}", f"{m['calls']:.0f}",
                "" if m.get("rank_corr_held_out") is None else f"{m['rank_corr_held_out']:+.2f}"]
        c = by.get(name)
        if c is None:
            row += [""] * 5
        elif "primary" not in c:  # replayed before the plan: rows without per-item arms, the Wilcoxon test only
            row += [f"{c['mean_difference']:+.3f} (no per-item arms)", "–", "–", "–", _p(c["p_holm"])]
        else:
            q = c["primary"]  # the plan's primary test (two-way bootstrap), the Wilcoxon test over seeds beside it
            row += [f"{q['diff']:+.3f} [{q['ci95'][0]:+.3f}, {q['ci95'][1]:+.3f}] ({_p(q['p_holm'])})",
                    _p(q["p_tost_holm"]), f"{q['mdd']:.3f}", q["verdict"], _p(c["p_holm"])]
        rows.append(row)
    label = "chrF" if second else "test score"
    first = LABELS.get(main["meta"].get("metric", ""), "test score") if second else "test score"
    headers = ["selector", f"{first} [95% CI]"] + (["chrF [95% CI]"] if second else []) + [
        "regret vs truth", "pulls", "rounds", "calls", "held-out rank corr.",
        f"Δ {label} vs CASE [95% CI] (Holm p)", f"TOST ±{decide['comparisons'][0]['margin']:g} (Holm p)",
        "MDD (Holm level)", "verdict", "Wilcoxon over seeds (Holm p; secondary)"]
    ref = main["reference"]
    return (f"{len(main['methods'])} selectors × {main['methods'][0]['seeds']} seeds, {main['n_val']} validation "
            f"items a pull; the arms' test scores span up to {ref['best_arm']:.3f} (mean {ref['mean_arm']:.3f}, sd "
            f"{ref['arms_sd']:.3f}), the arm best on the validation truth scores {ref['truth_best_arm']:.3f}. Primary "
            "test (ANALYSIS_PLAN.md): a two-way bootstrap over seeds and test items, Holm over the comparisons; "
            "\"equivalent\" only where the margin is at least the MDD:\n\n"
            + _table(headers, rows) + "\n")


def ablation_block(tables: Path, base: str = "dearicl-dynamic",
                   ablations: tuple[str, ...] = ("dearicl-noexplore", "dearicl-random")) -> str:
    """The paper's ablations of DEARICL_dynamic on every reward table: the method against each ablation, paired by
    seed from the replays' saved fits (rows.jsonl), Holm over each table's comparisons, TOST at the replay's margin."""
    from bench.replay import summarise
    from bench.reward_table import RewardTable

    rows = []
    for folder in sorted(p for p in tables.glob("*-gemma3-270m") if (p / "replay" / "summary.json").is_file()):
        main = json.loads((folder / "replay" / "summary.json").read_text())
        metric = "chrf" if (folder / "replay" / "summary-chrf.json").is_file() else main["test_metric"]
        fits = [json.loads(line) for line in (folder / "replay" / "rows.jsonl").read_text().splitlines() if line]
        fits = [r for r in fits if r["method"] in (base, *ablations)]
        if {r["method"] for r in fits} != {base, *ablations}:
            continue
        table = RewardTable.load(tables / f"{folder.name}.npz")
        margin = main["comparisons"][0]["margin"]
        got = summarise(fits, table, main["reward"], base, margin if metric == main["test_metric"] else 0.02, metric)
        score = {m["method"]: m["test_score"] for m in got["methods"]}
        for c in got["comparisons"]:
            if "primary" not in c:  # replayed before the plan kept per-item arms
                continue
            q = c["primary"]
            rows.append([folder.name.split("-")[0], f"`{c['method']}`", f"{score[base]:.3f}", f"{score[c['method']]:.3f}",
                         f"{-q['diff']:+.3f} [{-q['ci95'][1]:+.3f}, {-q['ci95'][0]:+.3f}]", _p(q["p_holm"]),
                         f"±{q['margin']:g}: {_p(q['p_tost_holm'])}", f"{q['mdd']:.3f}", q["verdict"],
                         _p(c["p_holm"])])
    return ("Primary test (ANALYSIS_PLAN.md): two-way bootstrap over seeds and test items, Holm over each table's "
            "comparisons:\n\n"
            + _table(["table", "ablation", f"`{base}`", "ablation's score", f"`{base}` − ablation [95% CI]",
                      "p (Holm)", "TOST margin: p (Holm)", "MDD (Holm level)", "verdict",
                      "Wilcoxon over seeds (Holm p; secondary)"], rows) + "\n")


def cores_block(folder: Path) -> str:
    """The bandit cores against a table's exact truth (`bench simulate --env table:`'s rq1-cores.json): eps-error
    against the target the pulls estimate (the fixed set), and against the pool with the protocol's floor beside."""
    from reports.study import PAPER_CALLS, PAPER_ROUNDS

    d = json.loads((folder / "rq1-cores.json").read_text())
    task = d["env"].get("task", "")
    as_selector = {"case": "case-static", "dearicl-paper": "dearicl-static"}  # the paper's two methods

    def paper(method: str) -> str:
        key = (as_selector.get(method, ""), task)
        return f"{PAPER_CALLS[key]} / {PAPER_ROUNDS.get(key, '–')}" if key in PAPER_CALLS else ""

    def pool(r: dict) -> str:
        return ("" if r.get("eps_error_pool_rate") is None else
                f"{r['eps_error_pool_rate']:.2f} (floor {r['oracle_floor_pool']:.2f})")

    rows = [[f"`{r['method']}`", f"{r['mean_rounds']:.1f} ± {r['rounds_se']:.1f}",
             f"{r['mean_pulls']:.1f} ± {r['pulls_se']:.1f}", f"{r['mean_calls']:.0f} ± {r['calls_se']:.0f}",
             f"{r['eps_error_rate']:.2f} ({r['eps_error_ucb95']:.2f})", pool(r),
             f"{r['mean_simple_regret']:.3f} ± {r['simple_regret_se']:.3f}", f"{r['coverage']:.2f} ± {r['coverage_se']:.2f}",
             ", ".join(f"{k} {v}" for k, v in r["stopped_by"].items()), paper(r["method"])] for r in d["results"]]
    target = d["results"][0].get("target", "pool")
    return (f"{d['env']['runs']} runs a method, {d['env']['n_val']} validation items a pull, m = {d['env']['m']}, "
            f"ε = {d['env']['epsilon']}, δ = {d['env']['delta']}; mean ± standard error over the runs. eps-error, "
            f"regret and coverage against the {target}'s exact means (what the pulls estimate), with the eps-error's "
            "95% upper bound; beside it the eps-error against the validation pool and its floor (an oracle that "
            "knows each arm's exact mean on the items pulled):\n\n"
            + _table(["method", "stop round", "pulls", "calls", f"eps-error vs {target} (95% bound)",
                      "eps-error vs pool (floor)", "simple regret", "width coverage", "stops",
                      "paper: calls / rounds (its task and model)"], rows) + "\n")


def stale_setting(label: str, row: dict) -> bool:
    """A stated-settings row run under an earlier definition of its setting (scripts/knob_sweep.py's STATED_SETTINGS
    since changed, e.g. the network): shown, marked, and left out of every count and verdict."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from knob_sweep import STATED_SETTINGS

    return label in STATED_SETTINGS and row.get("neural") != STATED_SETTINGS[label]


def stated_block(folder: Path) -> str:
    """DEARICL at every setting the paper states (scripts/knob_sweep.py --settings stated): each setting's stop
    rounds, the share of runs within the paper's 79-130 rounds with its 95% interval and the plan's verdict
    (ANALYSIS_PLAN.md, RQ1a), beside CASE's rounds under the same settings."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from knob_sweep import PAPER_CASE_ROUNDS, share_in_paper_range

    done = json.loads((folder / "sweep-stated" / "sweep.json").read_text())
    rows = []
    for label, r in done.items():
        count, lo, hi = share_in_paper_range(r["rounds"])
        is_case = label.startswith("case")
        word = "" if is_case else ("supported" if lo > 0.5 else "not reproduced" if hi < 0.5 else "cannot decide")
        if stale_setting(label, r):
            word, label = "not counted", f"{label} (run under an earlier definition of the setting)"
        rows.append([label if not is_case else f"`{label}` ({r['settings']['sigma']}, patience "
                     f"{r['settings']['patience']})", f"{r['mean_rounds']:.1f} ± {r['rounds_se']:.1f}",
                     f"{min(r['rounds'])}–{max(r['rounds'])}", f"{count}/{len(r['rounds'])} [{lo:.2f}, {hi:.2f}]",
                     f"{r['mean_calls']:.0f}", f"{r['eps_error_rate']:.2f} ({r['eps_error_ucb95']:.2f})", word])
    env = next(iter(done.values()))["env"]
    return (f"{env['runs']} runs a setting, {env['n_val']} validation items a pull, the same runs for every setting; "
            f"the paper: DEARICL 79 (AquaRAT) and 130 (GSM8K) rounds, CASE {PAPER_CASE_ROUNDS['AquaRAT']} and "
            f"{PAPER_CASE_ROUNDS['GSM8K']} (l.817). Verdict (RQ1a, the plan's test): supported when the 95% "
            "interval of the share within 79–130 lies above one half, not reproduced when below:\n\n"
            + _table(["setting (CASE: σ, patience)", "stop round", "range", "runs in 79–130 [95% CI]", "calls",
                      "eps-error vs fixed set (95% bound)", "verdict (RQ1a)"], rows) + "\n")


def certified_block(tables: Path) -> str:
    """The certified cores on the fixed set they estimate (`certified-fixed-set.json`: 100 runs, room to certify):
    how many runs certified, their pulls, and the eps-error against the fixed set with its 95% bound (the plan's
    claim: <= delta), the pool's eps-error and floor beside it."""
    rows = []
    for folder in sorted(p for p in tables.glob("*-gemma3-270m") if (p / "certified-fixed-set.json").is_file()):
        d = json.loads((folder / "certified-fixed-set.json").read_text())
        for r in d["results"]:
            rows.append([folder.name.split("-")[0], f"`{r['method']}`", f"{r['stopped_by'].get('certified', 0)}/{r['runs']}",
                         f"{r['mean_pulls']:.0f}", f"{r['mean_calls']:.0f}",
                         f"{r['eps_error_rate']:.2f} ({r['eps_error_ucb95']:.3f})",
                         "yes" if r["eps_error_ucb95"] <= r["delta"] else "no",
                         f"{r['eps_error_pool_rate']:.2f} (floor {r['oracle_floor_pool']:.2f})"])
    if not rows:
        return "(not run yet)\n"
    return ("100 runs a method, 20 validation items a pull, m = 10, ε = 0.1, δ = 0.05, at most 2,000 pulls; the "
            "target is the fixed set's exact means (what the pulls estimate). 100 runs with no error bound the rate "
            "at 0.030; 50 could not show ≤ 0.05 (0.058):\n\n"
            + _table(["table", "method", "certified", "pulls", "calls", "eps-error vs fixed set (95% bound)",
                      "bound ≤ δ", "eps-error vs pool (floor)"], rows) + "\n")


def stats_block(tables: Path) -> str:
    """Each committed table's build and signal, from the .npz files (`bench table show` computes the same): items
    recorded, build time, and per recorded column the arms' validation means, Friedman's randomised-block test over
    arms x validation items, and the validation-test correlation of the arm means."""
    from bench.reward_table import RewardTable

    rows = []
    for path in sorted(tables.glob("*-gemma3-270m.npz")):
        table = RewardTable.load(path)
        m = table.meta
        staged = f" of {m['n_test']} (staged)" if m.get("n_test_recorded") else ""
        for what in table.columns:
            means, signal = table.true_means(what), table.arm_signal(what)
            rows.append([m["task"], what, f"{len(table.rewards)} × {len(table.validation)} + {len(table.test)}{staged}",
                         _built(m), f"{means.min():.3f}–{means.max():.3f}",
                         f"{signal['friedman_p']:.2g}", f"{signal['val_test_r']:.2f}"])
    if not rows:
        return "(no table yet)\n"
    return ("Arms differ when Friedman's p < 0.01 (the goal); r is the Pearson correlation of the arms' validation "
            "and test means:\n\n" + _table(["task", "column", "arms × validation + test items", "built",
                                             "arm means (validation)", "Friedman p", "r (val, test)"], rows) + "\n")


def _built(meta: dict) -> str:
    """Where a table's calls were answered: here (the build's time) or a GPU run of `table calls` (its answers
    merged here; the build's own seconds then only score them)."""
    answered = meta.get("answers_recorded")
    if answered is None and meta.get("extends"):  # a staged build grown (`build --extend`): each stage's own time
        stages, stage = [], meta
        while stage:
            stages.insert(0, stage)
            stage = stage.get("extends")
        each = " + ".join(_stage_seconds(s) for s in stages)
        return f"{sum(s['build_seconds'] for s in stages):,.0f} s here in {len(stages)} stages ({each})"
    if answered is None:
        calls = meta.get("calls_answered", {})
        return f"{meta['build_seconds']:,.0f} s here" + (
            f" for {calls['here']:,} calls ({calls['cache']:,} read from its cache, answered earlier)" if calls.get("cache")
            else "")
    gpu = re.search(r"'gpu': '([^']+)'", str(answered))
    return f"calls answered on {gpu.group(1) if gpu else 'another machine'}"


def _stage_seconds(stage: dict) -> str:
    """A stage's build time; a stage of joined shards (`build --shard`) sums its processes and names each."""
    shards = stage.get("shard_seconds")
    if not shards:
        return f"{stage['build_seconds']:,.0f} s"
    return f"{stage['build_seconds']:,.0f} s in {len(shards)} shards ({', '.join(f'{s:,.0f} s' for s in shards)})"


def paired_runs(a: list[float], b: list[float]) -> tuple[float, float]:
    """Wilcoxon signed-rank test over runs paired by seed (the plan's RQ1b and RQ3): (mean of a - b, two-sided p);
    p 1 where every pair is equal."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    p = float(stats.wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
    return float(diff.mean()), p


def capped(result: dict) -> int:
    """Runs a cap stopped (pulls, budget or rounds) rather than the method's own rule."""
    return sum(result.get("stopped_by", {}).get(cap, 0) for cap in ("max_pulls", "budget", "max_rounds"))


def rq_rows(tables: Path, dearicl: str = "dearicl-paper") -> list[dict]:
    """The paper's RQ1b and RQ3 on every table, per CASE variant: DEARICL's stop rounds and calls against CASE's,
    paired by run (Wilcoxon), Holm over every (table, claim, variant); the plan's verdicts."""
    from bench.multiple_testing import holm_adjusted

    rows = []
    for folder in sorted(p for p in tables.glob("*-gemma3-270m") if (p / "rq1-cores.json").is_file()):
        runs = {r["method"]: r for r in json.loads((folder / "rq1-cores.json").read_text())["results"]}
        for case in ("case", "case-script") if dearicl in runs else ():
            for claim, key in (("RQ1b: fewer rounds", "rounds"), ("RQ3: fewer calls", "calls")):
                if case in runs:
                    diff, p = paired_runs(runs[dearicl][key], runs[case][key])
                    rows.append({"table": folder.name.split("-")[0], "claim": claim, "case": case, "diff": diff,
                                 "p": p, "dearicl": float(np.mean(runs[dearicl][key])),
                                 "base": float(np.mean(runs[case][key])), "runs": len(runs[case][key]),
                                 # a run stopped by a cap: its rounds and calls are lower bounds
                                 "base_capped": capped(runs[case]), "dearicl_capped": capped(runs[dearicl]),
                                 "dearicl_eps": runs[dearicl].get("eps_error_rate", math.nan),
                                 "base_eps": runs[case].get("eps_error_rate", math.nan)})
    for row, p_holm in zip(rows, holm_adjusted([r["p"] for r in rows])):
        row["p_holm"] = float(p_holm)
        row["verdict"] = ("supported" if p_holm < ALPHA and row["diff"] < 0 and not row["dearicl_capped"] else
                          "cannot decide" if row["dearicl_capped"] and row["base_capped"] else
                          "not reproduced" if (p_holm < ALPHA and row["diff"] > 0) or row["p"] == 1.0 else
                          "cannot decide")
    return rows


def rq_block(tables: Path, dearicl: str = "dearicl-paper") -> str:
    out = [[r["table"], r["claim"], f"`{r['case']}`", f"{r['dearicl']:.1f}",
            f"{r['base']:.1f}" + (f" ({r['base_capped']}/{r['runs']} at the cap)" if r["base_capped"] else ""),
            f"{r['dearicl'] / r['base']:.2f}", _p(r["p"]), _p(r["p_holm"]), r["verdict"],
            f"{r['dearicl_eps']:.2f} / {r['base_eps']:.2f}"]
           for r in rq_rows(tables, dearicl)]
    return (f"`{dearicl}` (every setting the paper states) against each CASE, 50 runs paired by seed; Wilcoxon "
            "signed-rank, Holm over every row (the plan's RQ1b and RQ3). A CASE run stopped by the 300-pull cap "
            "counts its rounds and calls at the cap, a lower bound of its own (so a 'supported' stays one); the "
            "last column is each stop's eps-error against the fixed set it estimates (share of runs), since a "
            "stop that comes sooner but wrong is no gain:\n\n"
            + _table(["table", "claim", "CASE", "DEARICL (mean)", "CASE (mean)", "ratio", "p", "p (Holm)",
                      "verdict", "eps-error DEARICL / CASE"], out) + "\n")


def blocks(study: Path) -> dict[str, str]:
    study = Path(study)
    return {"rq1": pair_block(study, "rq1", "dearicl-static", "case-static"),
            "certified-lucb": pair_block(study, "certified", "lucb-static", "case-static", base_part="rq1"),
            "certified-pac": pair_block(study, "certified", "dearicl-pac-static", "case-static", base_part="rq1"),
            "schedule": pair_block(study, "schedule", "dearicl-static", "dearicl-static", tasks=("wmt19",),
                                   base_part="rq1", labels=("paper's schedule (rq1)", "learning schedule")),
            "calls": calls_block(study),
            "certified-calls": calls_block(study, "certified", ("lucb-static", "dearicl-pac-static"), ratio=False),
            "rq2": rq2_block(study),
            "rq2-vs-dearicl-dynamic": rq2_block(study, base="dearicl-dynamic"),
            "sensitivity": sensitivity_block(study),
            **table_blocks(study.parent / "tables"),  # the studies folder holds the reward tables beside the study
            **({"demo": demo_block(study.parent / "readme-demo")}
               if (study.parent / "readme-demo" / "results.json").is_file() else {})}


def flat_tables(folders: list[Path]) -> list[tuple[str, float, int]]:
    """The tables whose every arm lies within the study's ε of the m-th best validation-pool mean (the reward the
    cores replayed), with that distance and m: there a top m is rarely far wrong, whatever the stop rule (a run's
    fixed set is 20 of the pool's items, so this describes it, without proving it of every run)."""
    from bench.reward_table import RewardTable

    out = []
    for folder in folders:
        env = json.loads((folder / "rq1-cores.json").read_text())["env"]
        path = folder.parent / f"{folder.name}.npz"
        if not path.is_file():
            continue
        means = np.sort(RewardTable.load(path).true_means(env["reward"]))[::-1]
        distance = float(means[env["m"] - 1] - means[-1])
        if distance <= env["epsilon"]:
            out.append((folder.name.split("-")[0], distance, env["m"]))
    return out


def test_band(folder: Path, metric: str) -> float:
    """The width of the band of the arms' test means under the replay's test metric (max - min over the arms)."""
    from bench.reward_table import RewardTable

    table = RewardTable.load(folder.parent / f"{folder.name}.npz")
    means = table.item_scores(metric)[:, table.test].mean(axis=1)
    return float(means.max() - means.min())


def headline_block(tables: Path) -> str:
    """The README's headline, every number read from the table studies and every verdict the plan's
    (studies/tables/ANALYSIS_PLAN.md): RQ1a per stated setting, RQ1b and RQ3 per CASE variant, the certified
    cores under the fixed-set target with the pool's floor beside, and DEARICL_static against CASE_static."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from knob_sweep import share_in_paper_range

    folders = sorted(p for p in tables.glob("*-gemma3-270m") if (p / "rq1-cores.json").is_file())
    names = [f.name.split("-")[0] for f in folders]
    lines = [f"Tables: {', '.join(names)} (Gemma 3 270M; 50 runs a method or setting, 20 validation items a pull)."]
    # RQ1a: every stated setting, every table
    cells, in_range, total, words, k_alone, hundred, stale = 0, 0, 0, {}, [0, 0, 0], 0, 0
    for folder in folders:
        path = folder / "sweep-stated" / "sweep.json"
        if not path.is_file():
            continue
        for label, r in json.loads(path.read_text()).items():
            if stale_setting(label, r):
                stale += 1
                continue
            count, lo, hi = share_in_paper_range(r["rounds"])
            if label.startswith("K = |A| alone"):  # the audit's patch alone, on the harness's schedule
                k_alone = [k_alone[0] + count, k_alone[1] + len(r["rounds"]), k_alone[2] + 1]
            if not label.startswith("stated"):
                continue
            hundred += "100 epochs" in label
            word = "supported" if lo > 0.5 else "not reproduced" if hi < 0.5 else "cannot decide"
            words[word] = words.get(word, 0) + 1
            cells, in_range, total = cells + 1, in_range + count, total + len(r["rounds"])
    readings = (f"Algorithm 1's one epoch a round, and l.782's 100 epochs in every (table, c_t) cell"
                if hundred == 3 * len(folders) else
                f"Algorithm 1's one epoch a round, and l.782's 100 epochs in {hundred} of {3 * len(folders)} "
                "(table, c_t) cells so far" if hundred else
                "Algorithm 1's one epoch a round; l.782's reading, 100 epochs, not run yet")
    if cells:
        lines.append(f"- **RQ1a, DEARICL stops within the paper's 79–130 rounds, every stated setting** (each c_t "
                     f"schedule; {readings}): {in_range} of "
                     f"{total} runs over {cells} (table, setting) cells stop there; verdicts: "
                     + ", ".join(f"{w} {n}" for w, n in sorted(words.items()))
                     + f". With K = |A| alone on the harness's schedule: {k_alone[0]} of {k_alone[1]} runs "
                     f"({k_alone[2]} tables)." + (f" Not counted: {stale} cell(s) run before the stated network was "
                                                 "used (marked on the tables page)." if stale else ""))
    # RQ1b and RQ3 per CASE variant
    rq = rq_rows(tables)
    for claim in ("RQ1b: fewer rounds", "RQ3: fewer calls"):
        for case in ("case", "case-script"):
            verdicts = [r["verdict"] for r in rq if r["claim"] == claim and r["case"] == case]
            if verdicts:
                capped = [r for r in rq if r["claim"] == claim and r["case"] == case and r["base_capped"]]
                lines.append(f"- **{claim.split(':')[0]}, DEARICL (stated settings) {claim.split(': ')[1]} than "
                             f"`{case}`** (Wilcoxon over 50 runs paired by seed, Holm): "
                             + ", ".join(f"{v} on {verdicts.count(v)}" for v in dict.fromkeys(verdicts))
                             + f" of {len(verdicts)} tables"
                             + (f"; `{case}` reached the 300-pull cap in "
                                + ", ".join(f"{r['table']} {r['base_capped']}/{r['runs']}" for r in capped)
                                + " runs (its count there is a lower bound)" if capped else "") + ".")
    stops = {r["table"]: (r["dearicl_eps"], r["base_eps"]) for r in rq
             if r["claim"].startswith("RQ1b") and r["case"] == "case"}
    if stops:
        rounds = [r["dearicl"] for r in rq if r["claim"].startswith("RQ1b")]
        base = [r["base"] for r in rq if r["claim"].startswith("RQ1b") and r["case"] == "case"]
        n_runs = max(r["runs"] for r in rq)
        apart = max(round(abs(d - c) * n_runs) for d, c in stops.values())
        lines.append(f"- **Fewer rounds, not a better answer**: DEARICL's stated stop comes at round {min(rounds):.1f}"
                     + (f"–{max(rounds):.1f}" if max(rounds) > min(rounds) else "")
                     + " (mean per table), and its eps-error against the fixed set it estimates is, against `case`'s "
                       "on the same runs, " + ", ".join(f"{t} {d:.2f} / {c:.2f}" for t, (d, c) in stops.items())
                     + f" (DEARICL / CASE, whose mean stop lies at {min(base):.0f}–{max(base):.0f} rounds): they "
                       f"differ by at most {apart} of {n_runs} runs on a table.")
    # are the gap-index stops right on the target they estimate (the fixed set)?
    gap = {}
    for folder in folders:
        for r in json.loads((folder / "rq1-cores.json").read_text())["results"]:
            if r["method"] in ("case", "case-script", "dearicl", "dearicl-paper") and r.get("target") == "fixed set":
                gap.setdefault(r["method"], []).append((r["eps_error_rate"], folder.name.split("-")[0]))
    if gap:
        flat = flat_tables(folders)
        lines.append("- **Gap-index stops against the fixed set they estimate** (eps-error, share of 50 runs): "
                     + "; ".join(f"`{m}` " + ", ".join(f"{t} {e:.2f}" for e, t in v) for m, v in gap.items())
                     + ". The stop rule B_t ≤ ε is not a certificate."
                     + (" On " + ", ".join(f"{t} (the lowest arm {d:.3f} below the {m}th best)" for t, d, m in flat)
                        + " every arm's validation-pool mean is within ε of the m-th best, so an eps-error of 0 there "
                          "says little about the stop rule." if flat else ""))
    # the certified cores under the fixed-set target (100 runs), the pool's floor beside
    bounds, floors, certified, runs = [], [], 0, 0
    for folder in folders:
        path = folder / "certified-fixed-set.json"
        for r in json.loads(path.read_text())["results"] if path.is_file() else []:
            bounds.append((r["eps_error_ucb95"], r["method"], folder.name.split("-")[0]))
            floors.append(r["oracle_floor_pool"])
            certified, runs = certified + r["stopped_by"].get("certified", 0), runs + r["runs"]
    if bounds:
        worst = max(bounds)
        lines.append(f"- **Certified cores on the fixed set they estimate** ({len(bounds)} (table, method) cells of "
                     f"100 runs; {certified} of {runs} runs certified within 2,000 pulls): the largest 95% bound of "
                     f"eps-error is {worst[0]:.3f} (`{worst[1]}`, {worst[2]}) against δ = 0.05; against the 50-item "
                     f"pool even an oracle of the fixed set errs in {min(floors):.2f}–{max(floors):.2f} of runs "
                     "(the protocol's floor).")
    # DEARICL_static (stated settings) against CASE_static, the plan's primary test
    verdicts = []
    for folder in folders:
        path = folder / "replay" / ("summary-chrf.json" if (folder / "replay" / "summary-chrf.json").is_file()
                                    else "summary.json")
        if path.is_file():
            c = next((c for c in json.loads(path.read_text())["comparisons"]
                      if c["method"] == "dearicl-static:paper" and "primary" in c), None)
            if c is not None:
                q = c["primary"]
                other = ""  # the table's own reward as the test score (WMT19's BERTScore), printed beside
                if path.name == "summary-chrf.json" and (folder / "replay" / "summary.json").is_file():
                    b = next((c["primary"] for c in json.loads((folder / "replay" / "summary.json").read_text())
                              ["comparisons"] if c["method"] == "dearicl-static:paper" and "primary" in c), None)
                    other = "" if b is None else (f"; BERTScore beside it, not the plan's metric: {b['diff']:+.4f}, "
                                                  f"{b['verdict']}, Holm p {_p(b['p_holm'])}")
                band = test_band(folder, json.loads(path.read_text())["test_metric"])
                if band <= 2 * q["margin"]:  # a margin as wide as the arms' whole band says little
                    other += (f"; the ±{q['margin']:g} margin spans the arms' whole band of test means, "
                              f"{band:.3f} wide")
                verdicts.append(f"{folder.name.split('-')[0]} {q['diff']:+.3f} ({q['verdict']}, Holm p "
                                f"{_p(q['p_holm'])}{other})")
    waiting = [f.name.split("-")[0] for f in folders if not any(f.name.split("-")[0] == v.split()[0] for v in verdicts)]
    if verdicts:
        lines.append("- **DEARICL_static (stated settings) − CASE_static, test score** (the plan's bootstrap): "
                     + "; ".join(verdicts) + (f"; not rerun at 20 items a pull yet: {', '.join(waiting)}" if waiting
                                              else "") + ".")
    return "\n".join(lines) + "\n"


def demo_block(folder: Path, base: str = "zero-shot") -> str:
    """The README demo's table and what its report's deciding tests say against `base` (the exact McNemar test on
    0/1 scores, Holm over the methods of each task), from the committed run (studies/readme-demo)."""
    from bench.records import read_records
    from reports.results import summary_table
    from reports.tables import significance

    results = json.loads((folder / "results.json").read_text())
    tests = significance(read_records(folder / "records.jsonl"), base)
    wins: dict[str, list[str]] = {}
    near = []
    order = {(r["method"], r["task"]): i for i, r in enumerate(results["runs"])}  # the run's own row order
    for (method, task), test in sorted(tests.items(), key=lambda kv: order[kv[0]]):
        p = test.deciding_p(corrected=True)
        if p < ALPHA:
            wins.setdefault(method, []).append(f"{task} ({_d(test.mean_diff)}, Holm p {_p(p)})")
        elif abs(test.mean_diff) >= 0.05:
            near.append(f"{method} on {task} ({_d(test.mean_diff)}, Holm p {_p(p)})")
    said = "; ".join(f"{method} on {', '.join(cells)}" for method, cells in wins.items()) or "no method"
    return ("It ends with this table (accuracy ×100 and 95% bootstrap intervals; `runs/demo/report.md` adds the paired "
            f"tests against {base}, exact McNemar on the 0/1 scores with Holm's correction over the methods of each "
            f"task; differences in points ×100). Significant against {base} after Holm: {said}"
            + (f". Not significant after it: {'; '.join(near)}" if near else "") + ".\n\n```\n"
            + summary_table(results) + "\n```\n")


def reach_block(tables: Path) -> str:
    """What the design can decide: per replayed table, the plan's margin on its deciding metric against the MDD of
    each comparison's primary test (an "equivalent" needs margin >= MDD), from the replays' summaries."""
    rows = []
    for folder in sorted(p for p in tables.glob("*-gemma3-270m") if (p / "replay" / "summary.json").is_file()):
        replay = folder / "replay"
        path = replay / ("summary-chrf.json" if (replay / "summary-chrf.json").is_file() else "summary.json")
        summary = json.loads(path.read_text())
        primary = [c["primary"] for c in summary["comparisons"] if "primary" in c]
        if not primary:
            continue  # an earlier protocol's summary (no per-item arms): no primary test
        mdds = [q["mdd"] for q in primary]
        margin = primary[0]["margin"]
        meta = summary["meta"]  # a table saved before `metric` was kept: a ranked task's metric is accuracy
        task_metric = meta.get("metric") or ("accuracy" if meta.get("answering", {}).get("scoring") == "rank"
                                             else "metric")
        metric = ("chrF" if path.name == "summary-chrf.json" else task_metric
                  if summary["test_metric"] == "metric" else summary["test_metric"])
        rows.append([folder.name.split("-")[0], metric, f"±{margin:g}", f"{min(mdds):.3f}–{max(mdds):.3f}",
                     f"{sum(not margin >= m for m in mdds)} of {len(mdds)}",
                     f"{sum(q['verdict'].startswith('equivalent') for q in primary)}"])
    if not rows:
        return "(no replay yet)\n"
    return ("Per table, the plan's margin against the MDD of each comparison's primary test (two-way bootstrap, 80% "
            "power at Holm's strictest level): where the margin is below the MDD, the design cannot show "
            "equivalence and the verdict reads \"cannot decide (margin < MDD)\" unless the difference test "
            "decides:\n\n" + _table(["table", "deciding metric", "margin", "MDD (range over the comparisons)",
                                      "comparisons with margin < MDD", "equivalent"], rows) + "\n")


def table_blocks(tables: Path) -> dict[str, str]:
    """`table-NAME-replay` and `table-NAME-cores` for every reward-table study folder under `tables`."""
    out = ({"table-ablations": ablation_block(tables), "table-rq": rq_block(tables), "table-stats": stats_block(tables),
            "table-certified": certified_block(tables), "headline": headline_block(tables),
            "table-reach": reach_block(tables)} if tables.is_dir() else {})
    for folder in sorted(p for p in tables.glob("*-gemma3-270m") if p.is_dir()) if tables.is_dir() else []:
        name = folder.name.split("-")[0]
        if (folder / "replay" / "summary.json").is_file():
            out[f"table-{name}-replay"] = replay_block(folder)
        if (folder / "rq1-cores.json").is_file():
            out[f"table-{name}-cores"] = cores_block(folder)
        if (folder / "sweep-stated" / "sweep.json").is_file():
            out[f"table-{name}-stated"] = stated_block(folder)
    return out


# ---- READMEs -------------------------------------------------------------------------------------------------------
def render_into(text: str, made: dict[str, str]) -> tuple[str, list[str]]:
    """`text` with each claims block replaced by its computed body; and the names of blocks that changed."""
    stale = []

    def put(match: re.Match) -> str:
        name = match.group("name")
        if name not in made:
            raise KeyError(f"unknown claims block '{name}' (known: {', '.join(made)})")
        if match.group("body") != made[name]:
            stale.append(name)
        return match.group(1) + made[name] + match.group(4)

    return BLOCK.sub(put, text), stale


TESTED = re.compile(r"\bp\s*(=|<|≈|≥|≤)\s*\d(?![\d.]*/)|\bHolm (p )?\d|McNemar p|\bTOST p")  # a clause that states a test's result (p = 1/2 is not)
QUOTED = re.compile(r"the paper[^;|)]*|Table \d+: [^)|]*|Figure \d+[^)|]*")  # the paper's own numbers, quoted
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+\.\d+(?:e-\d+)?(?!\w|\.\d)")
CLAUSE = re.compile(r"\s*\|\s*|(?<=[.;:])\s+(?=[A-Z(`*])")  # table cells and sentences: a result's own clause


def unbacked_numbers(text: str, sources: str = "") -> list[tuple[int, list[str]]]:
    """Prose outside the claims blocks that states a test result with a number that no block of the page, nor the
    generated `sources` (a page without blocks: its run's JSON and report.md), gives at the prose's rounding:
    (line number, those numbers). A hand-typed restatement that went stale, or never came from the data, is found
    here; the paper's quoted numbers are not counted."""
    def value(number: str) -> float:
        return float(number.replace("−", "-"))

    given = [abs(value(n)) for m in BLOCK.finditer(text) for n in NUMBER.findall(m.group("body"))]
    given += [abs(value(n)) * scale for n in NUMBER.findall(sources) for scale in (1, 100)]  # shares, as ×100

    def backed(number: str) -> bool:
        x = abs(value(number))
        if "e-" in number:
            return any(abs(y - x) <= 0.05 * x for y in given)
        half = 0.5 * 10 ** -len(number.split(".")[1])
        return any(abs(y - x) <= half + 1e-12 for y in given)

    out: dict[int, list[str]] = {}
    for first, unit in _prose_units(text):
        for clause in CLAUSE.split(unit):
            if TESTED.search(clause):
                for number in NUMBER.findall(QUOTED.sub("", clause)):
                    if not backed(number):
                        out.setdefault(first + unit[:unit.index(number)].count("\n"), []).append(number)
    return sorted(out.items())


def _prose_units(text: str) -> list[tuple[int, str]]:
    """The page's prose outside the claims blocks and code fences, as (first line, text): a paragraph or list
    item (a sentence may run over several lines), or one table row."""
    units: list[tuple[int, str]] = []
    current: list[str] = []
    first = 0
    skip = False

    def close():
        if current:
            units.append((first, "\n".join(current)))
            current.clear()

    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("<!-- claims:") or line.startswith("```"):
            close()
            skip = not skip if line.startswith("```") else True
            continue
        if line.startswith("<!-- /claims -->"):
            skip = False
            continue
        if skip:
            continue
        if not line.strip() or line.lstrip().startswith(("|", "- ", "* ", "#")) or re.match(r"\s*\d+\. ", line):
            close()
            if line.strip():
                first, current[:] = i, [line]
                if line.lstrip().startswith(("|", "#")):
                    close()
            continue
        if not current:
            first = i
        current.append(line)
    close()
    return units


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.claims", description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path)
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--check", nargs="+", type=Path, metavar="README", help="exit 1 if a block is stale")
    how.add_argument("--write", nargs="+", type=Path, metavar="README", help="rewrite the blocks in place")
    how.add_argument("--print", action="store_true", help="print every block")
    args = parser.parse_args(argv)
    if not (args.study / "rq1-wmt19-seed0").is_dir():
        print(f"error: {args.study} is not the study folder (no rq1-wmt19-seed0 in it)", file=sys.stderr)
        return 2
    made = blocks(args.study)
    if args.print:
        for name, body in made.items():
            print(f"<!-- claims:{name} -->\n{body}<!-- /claims -->\n")
        return 0
    status = 0
    for path in args.check or args.write:
        try:
            text, stale = render_into(path.read_text(), made)
        except (OSError, KeyError) as err:
            print(f"error: {path}: {err}", file=sys.stderr)
            return 2
        if args.write:
            path.write_text(text)
            print(f"{path}: {len(BLOCK.findall(text))} block(s), {len(stale)} rewritten")
        elif stale:
            print(f"{path}: stale claims block(s) {', '.join(stale)}: run python -m reports.claims {args.study} "
                  f"--write {path}", file=sys.stderr)
            status = 1
        for line, numbers in unbacked_numbers(text):
            print(f"{path}:{line}: prose states a test result with {', '.join(numbers)}, which no claims block of "
                  f"the page gives: take it from a block or quote its source", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
