import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.compare import compare, format_checks
from bench.records import ItemRecord, append_jsonl
from reports.render import write_report
from reports.stats import PairedTTest

ROOT = Path(__file__).resolve().parent.parent


def test_paired_t_test_matches_hand_computation():
    a = {"1": 0.9, "2": 0.8, "3": 0.7, "4": 0.95, "5": 0.85}
    b = {"1": 0.6, "2": 0.7, "3": 0.65, "4": 0.7, "5": 0.6, "6": 0.1}  # item 6 has no pair: ignored
    d = np.array([0.3, 0.1, 0.05, 0.25, 0.25])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(5))
    test = PairedTTest.of(a, b)
    assert test.n == 5 and test.t == pytest.approx(t) and test.mean_diff == pytest.approx(d.mean())
    assert test.sd_diff == pytest.approx(d.std(ddof=1))  # the sample SD the MDD is computed from
    from scipy.stats import t as student_t

    assert test.p == pytest.approx(2 * student_t.sf(t, df=4)) and test.p == pytest.approx(0.01726, abs=1e-4)
    assert test.better() and not test.worse()


def test_paired_t_test_degenerate_cases():
    assert math.isnan(PairedTTest.of({"1": 1.0}, {"1": 0.0}).p)  # one pair
    same_diff = PairedTTest.of({"1": 1.0, "2": 1.0}, {"1": 0.0, "2": 0.0})
    assert math.isnan(same_diff.p) and not same_diff.better()
    # differences that vary though the sums do not: a real test (mean 0, p 1), not the zero-variance case
    swapped = PairedTTest.of({"1": 1.0, "2": 0.0}, {"1": 0.0, "2": 1.0})
    assert swapped.p == pytest.approx(1.0) and swapped.mean_diff == 0.0
    disjoint = PairedTTest.of({"1": 1.0}, {"2": 0.0})  # no item in common: no test of either kind
    assert disjoint.n == 0 and disjoint.mcnemar_p is None and math.isnan(disjoint.p)


def test_tost_is_statsmodels_and_a_difference_without_spread_is_known_exactly():
    from statsmodels.stats.weightstats import ttost_paired

    from reports.stats import tost_paired

    a, b = np.array([0.5, 0.62, 0.7, 0.4]), np.array([0.49, 0.6, 0.72, 0.41])
    assert tost_paired(a, b, 0.05) == pytest.approx(ttost_paired(a, b, -0.05, 0.05)[0])
    two = tost_paired(a[:2], b[:2], 0.05)  # two pairs with spread: already statsmodels' test
    assert 0 < two < 1 and two == pytest.approx(ttost_paired(a[:2], b[:2], -0.05, 0.05)[0])
    exact = np.array([0.5, 0.625, 0.75, 0.375])
    shifted = exact - 2**-7  # the same difference on every item, exactly in binary
    assert tost_paired(exact, shifted, 0.02) == 0.0 and tost_paired(exact, shifted, 0.005) == 1.0
    assert tost_paired(a[:1], b[:1], 0.02) == 0.0 and tost_paired(a[:1], b[:1], 0.005) == 1.0  # one pair


def test_better_and_worse_need_p_strictly_below_alpha_on_the_asked_p_and_the_sign_of_the_difference():
    from dataclasses import replace

    a = {"1": 0.9, "2": 0.8, "3": 0.7, "4": 0.95, "5": 0.85}
    b = {"1": 0.6, "2": 0.7, "3": 0.65, "4": 0.7, "5": 0.6}
    up, down = PairedTTest.of(a, b), PairedTTest.of(b, a)  # p = 0.017 both ways, opposite signs
    assert down.worse() and not down.better() and up.better() and not up.worse()
    assert not up.better(alpha=up.p) and not down.worse(alpha=down.p)  # p == alpha is not significant
    assert up.better(alpha=0.02) and not up.better(alpha=0.01)
    # corrected=True reads the Holm-adjusted p (unset: no verdict), never the raw one
    assert not down.worse(corrected=True) and not up.better(corrected=True)
    assert replace(down, p_holm=0.04).worse(corrected=True) and not replace(down, p_holm=0.06).worse(corrected=True)
    assert replace(up, p_holm=0.04).better(corrected=True) and not replace(up, p_holm=0.06).better(corrected=True)


def test_bootstrap_ci_is_scipys_bca_interval_from_two_items_up():
    from scipy import stats

    from reports.stats import bootstrap_ci

    skewed = np.array([0.1, 0.2, 0.2, 0.3, 0.9, 1.5, 3.0, 0.05, 0.4, 0.2])

    def scipy_ci(method, level=0.9, resamples=500, seed=7):
        res = stats.bootstrap((np.sort(skewed),), np.mean, confidence_level=level, n_resamples=resamples,
                              method=method, rng=np.random.default_rng(seed))
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    assert bootstrap_ci(skewed) == pytest.approx(scipy_ci("BCa", 0.95, 2000, 0))  # the defaults: 95%, 2,000, seed 0
    bca, percentile = scipy_ci("BCa"), scipy_ci("percentile")
    assert bootstrap_ci(skewed, confidence=0.9, resamples=500, seed=7) == pytest.approx(bca)
    assert bca != pytest.approx(percentile)  # so the interval above is BCa's, not the fallback's
    assert bootstrap_ci(skewed[::-1], confidence=0.9, resamples=500, seed=7) == pytest.approx(bca)  # item order
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)  # two items already have an interval
    assert bootstrap_ci([0.5]) == (None, None) and bootstrap_ci([]) == (None, None)
    assert bootstrap_ci([0.25, 0.25, 0.25]) == (0.25, 0.25)
    # BCa undefined (one resample: its bias correction is infinite): the percentile interval of the same draws
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        undefined = stats.bootstrap((np.array([0.0, 1.0, 1.0, 2.0]),), np.mean, n_resamples=1, method="BCa",
                                    rng=np.random.default_rng(0)).confidence_interval
    assert np.isnan(undefined.low) and np.isnan(undefined.high)
    assert bootstrap_ci([2.0, 1.0, 0.0, 1.0], resamples=1) == (1.25, 1.25)


def _make_run(out, scores_by_method, task="gsm8k", selection_calls=None, groups=None, extras=None, traces=None):
    """extras: method -> a secondary metric's values, item by item ({"chrf": [...]}); traces: method -> its fit's trace."""
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    for method, scores in scores_by_method.items():
        for i, s in enumerate(scores):
            extra = {k: float(v[i]) for k, v in (extras or {}).get(method, {}).items()}
            recs.append(ItemRecord(method, task, f"t{i}", [], "h", "o", "p", "g", float(s), 0.5, extra=extra))
    append_jsonl(out / "records.jsonl", recs)
    fits = [{"method": m, "task": task, "level": "task", "selection_seconds": 1.0,
             "selection_calls": (selection_calls or {}).get(m, 0), "budget": None, "budget_exhausted": False,
             "trace": (traces or {}).get(m, []), "group": (groups or {}).get(m, "task")} for m in scores_by_method]
    append_jsonl(out / "fits.jsonl", fits)
    (out / "config.json").write_text(json.dumps({"identity": {"tasks": [task]}, "methods": list(scores_by_method)}))
    from reports.results import build_results, write_results

    write_results(out, build_results(out, llm="fake"))


def test_report_daggers_against_baseline(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.4, 30)
    noise = rng.normal(0, 0.05, 30)
    _make_run(tmp_path, {"zero-shot": base, "good": base + 0.3 + noise,
                         "same": base + noise - noise.mean(),  # mean difference exactly 0: t = 0
                         "bad": base - 0.2 + noise})
    write_report(tmp_path, baseline="zero-shot")
    md = (tmp_path / "report.md").read_text()
    accuracy = md.split("## Accuracy")[1].split("##")[0]
    row = {line.split("|")[1].strip(): line for line in accuracy.splitlines() if line.startswith("| ")}
    # far apart: the marks survive Holm's correction over the three methods
    assert "‡" in row["good"] and "†" not in row["same"] and "‡" not in row["same"] and "⇓" in row["bad"]
    assert (tmp_path / "selection_runtime.png").stat().st_size > 1000
    assert r"$^\ddagger$" in (tmp_path / "report.tex").read_text()
    assert "p (Holm)" in md and "McNemar p" in md


def test_minimal_detectable_difference_matches_the_noncentral_t_power():
    from reports.stats import min_detectable_difference

    # statsmodels' TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8) gives these effect sizes
    assert min_detectable_difference(1.0, 200) == pytest.approx(0.1991, abs=5e-4)
    assert min_detectable_difference(1.0, 20) == pytest.approx(0.6604, abs=5e-4)
    assert min_detectable_difference(0.2, 200) == pytest.approx(0.2 * min_detectable_difference(1.0, 200))
    # large n: the normal approximation (z_0.975 + z_0.8) / sqrt(n)
    assert min_detectable_difference(1.0, 5000) == pytest.approx((1.959964 + 0.841621) / 5000 ** 0.5, rel=2e-3)
    assert math.isnan(min_detectable_difference(0.0, 50)) and math.isnan(min_detectable_difference(1.0, 2))
    # the test's power at the MDD is 80%, checked by simulation
    rng = np.random.default_rng(0)
    from scipy import stats as sps
    mdd = min_detectable_difference(1.0, 30)
    hits = [sps.ttest_1samp(rng.normal(mdd, 1.0, 30), 0).pvalue < 0.05 for _ in range(4000)]
    assert np.mean(hits) == pytest.approx(0.8, abs=0.02)


def test_minimal_detectable_difference_at_strict_levels_where_scipy_nct_fails():
    """At Holm-level alphas scipy's noncentral t gives NaN for some shifts (n 10, alpha 1e-4 near 2.4 sd): the MDD
    still comes out, and a simulated test at that level has 80% power there."""
    from scipy import stats as sps

    from reports.stats import min_detectable_difference

    for n, alpha in ((10, 1e-4), (200, 0.05 / 27), (3, 0.05)):
        mdd = min_detectable_difference(1.0, n, alpha=alpha)
        assert math.isfinite(mdd)
        rng = np.random.default_rng(n)
        hits = [sps.ttest_1samp(rng.normal(mdd, 1.0, n), 0).pvalue < alpha for _ in range(4000)]
        assert np.mean(hits) == pytest.approx(0.8, abs=0.025)


def test_paired_tests_table_shows_the_minimal_detectable_difference(tmp_path):
    rng = np.random.default_rng(5)
    base = rng.uniform(0.3, 0.5, 60)
    _make_run(tmp_path, {"zero-shot": base, "knn": base + rng.normal(0, 0.1, 60)})
    write_report(tmp_path, baseline="zero-shot")
    table = (tmp_path / "report.md").read_text().split("## Paired tests")[1]
    knn = next(line for line in table.splitlines() if line.startswith("| knn "))
    sd, mdd = (float(c) for c in knn.split("|")[10:12])
    assert sd == pytest.approx(10, abs=2) and mdd == pytest.approx(sd * 0.3677, rel=0.01)  # n = 60


def test_secondary_metric_gets_an_interval_and_a_paired_test_against_the_baseline(tmp_path):
    from scipy import stats as sps

    from reports.stats import bootstrap_ci

    rng = np.random.default_rng(3)
    base_chrf, noise = rng.uniform(0.1, 0.2, 40), rng.normal(0, 0.02, 40)
    chrf = {"zero-shot": base_chrf, "knn": base_chrf + 0.03 + noise, "mmr": base_chrf + noise}
    _make_run(tmp_path, {m: [0.5] * 40 for m in chrf}, task="wmt19", extras={m: {"chrf": v} for m, v in chrf.items()})
    write_report(tmp_path, baseline="zero-shot")
    table = (tmp_path / "report.md").read_text().split("Secondary metrics")[1].split("## ")[0]
    rows = {c[0]: c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in table.splitlines()
                              if line.startswith("| ") and "chrf" in line)}
    low, high = bootstrap_ci(chrf["knn"])
    assert rows["knn"][3] == f"{100 * chrf['knn'].mean():.2f} [{100 * low:.2f}, {100 * high:.2f}]"
    diff = [sps.ttest_rel(chrf[m], base_chrf) for m in ("knn", "mmr")]
    assert float(rows["knn"][4]) == pytest.approx(100 * (chrf["knn"] - base_chrf).mean(), abs=0.006)
    assert float(rows["knn"][5]) == pytest.approx(diff[0].pvalue, abs=1e-4)
    # Holm over the two methods: the smaller p doubles, the larger stays (never below the smaller's adjusted value)
    assert float(rows["knn"][6]) == pytest.approx(min(1, 2 * diff[0].pvalue), abs=1e-4)
    assert float(rows["mmr"][6]) == pytest.approx(max(diff[1].pvalue, min(1, 2 * diff[0].pvalue)), abs=1e-4)
    assert rows["zero-shot"][4] == "baseline" and float(rows["knn"][7]) > 0


def test_holm_and_mcnemar_by_hand():
    from reports.stats import holm, mcnemar_exact

    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06) and math.isnan(adjusted["d"])
    a = np.array([1, 1, 1, 1, 1, 1, 0, 1, 1, 0], dtype=float)
    b = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 1], dtype=float)
    # 6 items only a got right, 1 only b: two-sided binomial p = 2 * P(X <= 1 | 7, 1/2) = 16 / 128
    assert mcnemar_exact(a, b) == pytest.approx(16 / 128)
    assert mcnemar_exact(a, a) == 1.0 and mcnemar_exact(a * 0.5, b) is None


def test_holm_adjusted_is_statsmodels_holm_and_leaves_the_collector_as_it_was():
    import gc

    from bench.multiple_testing import holm_adjusted

    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04), in the order given
    assert holm_adjusted([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm_adjusted([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and len(holm_adjusted([])) == 0
    assert holm_adjusted([0.2]) == pytest.approx([0.2])  # a family of one is not adjusted
    assert gc.get_freeze_count() == 0  # what the call froze out of statsmodels' gc.collect() is back
    with pytest.raises(TypeError):  # statsmodels' own error for p-values that are not numbers
        holm_adjusted(["x", "y"])
    assert gc.get_freeze_count() == 0  # after a failure too


def test_exact_match_marks_rest_on_mcnemar_not_the_t_test(tmp_path):
    # 4 items only the method gets right, none only the baseline: t-test p 0.044 but exact McNemar 2 / 16 = 0.125
    baseline, lucky = np.zeros(50), np.zeros(50)
    lucky[:4] = 1
    test = PairedTTest.of(dict(enumerate(lucky)), dict(enumerate(baseline)))
    assert test.p < 0.05 and test.mcnemar_p == pytest.approx(0.125)
    assert not test.better() and test.deciding_p() == pytest.approx(0.125)
    strong = np.zeros(50)
    strong[:12] = 1  # 12 wins, no loss: McNemar p = 2 / 4096
    assert PairedTTest.of(dict(enumerate(strong)), dict(enumerate(baseline))).better()
    _make_run(tmp_path, {"zero-shot": baseline, "lucky": lucky, "strong": strong})
    write_report(tmp_path, baseline="zero-shot")
    accuracy = (tmp_path / "report.md").read_text().split("## Accuracy")[1].split("##")[0]
    rows = {line.split("|")[1].strip(): line for line in accuracy.splitlines() if line.startswith("| ")}
    assert not any(mark in rows["lucky"] for mark in "†‡") and "‡" in rows["strong"]
    assert "{" not in (tmp_path / "report.md").read_text().split("## Accuracy")[1].split("\n\n")[1]  # caption filled in


def test_a_mark_that_does_not_survive_holm_stays_a_dagger(tmp_path):
    rng = np.random.default_rng(3)
    base = rng.uniform(0.3, 0.5, 40)
    noise = rng.normal(0, 0.1, 40)
    weak = base + noise - noise.mean() + 0.035  # p just under 0.05 alone
    scores = {"zero-shot": base, "weak": weak}
    scores.update({f"null{i}": base + rng.normal(0, 0.1, 40) for i in range(4)})
    _make_run(tmp_path, scores)
    write_report(tmp_path, baseline="zero-shot")
    md = (tmp_path / "report.md").read_text()
    accuracy = md.split("## Accuracy")[1].split("##")[0]
    row = next(line for line in accuracy.splitlines() if line.startswith("| weak "))
    tests_table = md.split("## Paired tests")[1]
    weak = next(line for line in tests_table.splitlines() if line.startswith("| weak "))
    p, p_holm = (float(c) for c in weak.split("|")[6:8])
    assert p < 0.05 < p_holm  # significant alone, not after the correction over five methods
    assert "†" in row and "‡" not in row


def test_report_groups_rows_like_the_paper_and_shows_the_data_ablation(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.4, 20)
    groups = {"zero-shot": "task", "knn": "instance", "pirank": "instance", "pirank@dearicl-data": "instance",
              "case-dynamic": "bandit", "dearicl-dynamic": "bandit+ltr"}
    _make_run(tmp_path, {m: base + 0.01 * i for i, m in enumerate(groups)}, groups=groups)
    write_report(tmp_path)  # baseline defaults to case-dynamic, as in the paper
    md = (tmp_path / "report.md").read_text()
    accuracy = md.split("## Accuracy")[1].split("## ")[0]
    first_col = [line.split("|")[1].strip() for line in accuracy.splitlines() if line.startswith("| ")][1:]
    assert first_col == ["**Task level**", "zero-shot", "**Instance level**", "knn", "pirank",
                         "**Instance level (bandit)**", "case-dynamic", "**Instance level (bandit + LTR)**",
                         "dearicl-dynamic"]
    assert "`case-dynamic`" in accuracy
    ablation = md.split("## Data ablation")[1].split("## ")[0]
    rows = [line.split("|")[1].strip() for line in ablation.splitlines() if line.startswith("| ")][1:]
    assert rows == ["pirank (own data)", "pirank (DEARICL data)", "dearicl-dynamic"]
    assert f"{100 * (base.mean() + 0.03):.2f}" in ablation  # pirank@dearicl-data (4th method) scores base + 0.03


def test_compare_flags_score_drop_and_call_rise(tmp_path):
    ref = {"runs": [{"method": "knn", "task": "gsm8k", "score": 0.5, "llm_calls": {"selection": 10, "inference": 5}}]}
    ok = {"runs": [{"method": "knn", "task": "gsm8k", "score": 0.46, "llm_calls": {"selection": 10, "inference": 5}}]}
    drop = {"runs": [{"method": "knn", "task": "gsm8k", "score": 0.40, "llm_calls": {"selection": 10, "inference": 5}}]}
    more = {"runs": [{"method": "knn", "task": "gsm8k", "score": 0.5, "llm_calls": {"selection": 20, "inference": 5}}]}
    assert all(c.ok for c in compare(ok, ref, 0.05, 0.05))
    assert [c.what for c in compare(drop, ref, 0.05, 0.05) if not c.ok] == ["score"]
    assert [c.what for c in compare(more, ref, 0.05, 0.05) if not c.ok] == ["llm_calls"]
    assert [c.what for c in compare({"runs": []}, ref, 0.05, 0.05) if not c.ok] == ["present"]
    # a replayed selection made no selection call: fewer calls must not pass as "no regression"
    replayed = {"runs": [{**ok["runs"][0], "llm_calls": {"selection": 0, "inference": 5},
                          "selection_reused_from": "runs/selections"}]}
    assert [c.what for c in compare(replayed, ref, 0.05, 0.05) if not c.ok] == ["fitted"]


def test_compare_refuses_to_weigh_scores_of_two_metrics():
    """WMT19 scored BERTScore F1 before and chrF now: a chrF run against a BERTScore reference is a changed cell
    to accept, not a score drop (nor, the other way round, a pass)."""
    calls = {"selection": 0, "inference": 2}
    ref = {"runs": [{"method": "knn", "task": "wmt19", "metric": "bertscore_f1", "score": 0.70, "llm_calls": calls}]}
    now = {"runs": [{"method": "knn", "task": "wmt19", "metric": "chrf", "score": 0.95, "llm_calls": calls}]}
    failed = [c for c in compare(now, ref, 0.05, 0.05) if not c.ok]
    assert [c.what for c in failed] == ["metric"] and "chrf here and by bertscore_f1" in failed[0].details[0]
    assert "CHANGED" in format_checks(failed) and "score differently" in format_checks(failed)
    same = {"runs": [{**now["runs"][0], "metric": "bertscore_f1"}]}
    assert all(c.ok for c in compare(same, ref, 0.05, 0.05))


def test_compare_cli_exit_codes(tmp_path, capsys):
    _make_run(tmp_path / "run", {"zero-shot": [1, 0, 1, 1], "knn": [1, 1, 1, 1]})
    ref = tmp_path / "ref.json"
    ref.write_text((tmp_path / "run" / "results.json").read_text())
    assert main(["compare", str(tmp_path / "run"), "--to", str(ref), "--tolerance", "0"]) == 0
    data = json.loads(ref.read_text())
    data["runs"][1]["score"] = 1.2
    ref.write_text(json.dumps(data))
    assert main(["compare", str(tmp_path / "run"), "--to", str(ref), "--tolerance", "0.1"]) == 1
    missing = tmp_path / "refs" / "mine.json"
    assert main(["compare", str(tmp_path / "run"), "--to", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--to {missing}: no reference there yet" in err and f"--to {missing} --accept" in err
    # a first reference: --accept creates it (and its folder); the next comparison passes against it
    assert main(["compare", str(tmp_path / "run"), "--to", str(missing), "--accept"]) == 0
    assert "created the reference" in capsys.readouterr().out
    assert json.loads(missing.read_text()) == json.loads((tmp_path / "run" / "results.json").read_text())
    assert main(["compare", str(tmp_path / "run"), "--to", str(missing)]) == 0
    # a failed check names the user's own files in its way out, or the wrapper's command
    data = json.loads(missing.read_text())
    data["runs"][1]["fingerprint"] = {"demos": "0" * 16, "outputs": "0" * 16}
    missing.write_text(json.dumps(data))
    assert main(["compare", str(tmp_path / "run"), "--to", str(missing)]) == 1
    out = capsys.readouterr().out
    assert f"accept it: python -m bench compare {tmp_path / 'run'} --to {missing} --accept" in out
    assert "smoke.sh" not in out
    main(["compare", str(tmp_path / "run"), "--to", str(missing), "--accept-hint", "bash mine.sh --update"])
    assert "accept it: bash mine.sh --update" in capsys.readouterr().out
    # a score-only drop names the way out too; a rise passes and is named; accepting prints no hint
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    data["runs"][1]["score"] += 0.2
    data["runs"][0]["score"] -= 0.2
    missing.write_text(json.dumps(data))
    assert main(["compare", str(tmp_path / "run"), "--to", str(missing), "--tolerance", "0.05"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "accept it: python -m bench compare" in out
    assert "1 cell(s) score higher than the reference (zero-shot on gsm8k): they pass" in out
    assert main(["compare", str(tmp_path / "run"), "--to", str(missing), "--accept"]) == 0
    assert "accept it" not in capsys.readouterr().out


def test_simulated_study_tables_merge_runs_of_a_family(tmp_path):
    import json

    from reports.simulated import main as simulated_main

    def row(method, pulls, coverage):
        return {"method": method, "runs": 2, "mean_pulls": float(np.mean(pulls)), "pulls_se": 1.5,
                "eps_error_rate": 0.5, "eps_error_rate_se": 0.5, "error_rate": 1.0, "error_rate_se": 0.0,
                "mean_simple_regret": 0.1234, "simple_regret_se": 0.01, "coverage": coverage,
                "coverage_se": None if coverage is None else 0.1, "stopped_by": {"gap": 2}}

    env = {"name": "order", "m": 3, "epsilon": 0.1, "delta": 0.05, "noise": 0.1, "n_arms": 24, "n_val": 5, "seed": 0}
    (tmp_path / "a.json").write_text(json.dumps({"env": env, "results": [row("case", [10, 13], 0.0)]}))
    (tmp_path / "b.json").write_text(json.dumps({"env": env, "results": [row("lucb", [500, 503], None)]}))
    out = tmp_path / "tables.md"
    assert simulated_main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out),
                           "--scatter", str(tmp_path / "s.png")]) == 0
    text = out.read_text()
    assert text.count("## order (SIMULATED)") == 1  # both files land in one family table
    assert "| case " in text and "| lucb " in text and "11.5 ± 1.5" in text and "501.5 ± 1.5" in text
    assert "0.123 ± 0.010" in text and "n/a" in text  # no coverage known: n/a, not a number
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_plots_stay_readable_with_many_methods(tmp_path):
    from PIL import Image

    from reports.plots import accuracy_vs_calls, convergence_plot, selection_runtime_chart

    runs = [{"method": f"method-{i:02d}", "task": task, "selection_seconds": 10.0 ** (i % 5 - 2), "score": 0.5,
             "ci_low": 0.4, "ci_high": 0.6, "metric": "exact_match", "metric_label": "EM",
             "llm_calls": {"selection": i * 3, "inference": 5}} for i in range(25) for task in ("gsm8k", "wmt19")]
    width, height = Image.open(selection_runtime_chart(runs, tmp_path / "rt.png")).size
    assert width < 1.5 * height + 600 and width < 1400  # one horizontal bar per method, panels per task
    assert Image.open(accuracy_vs_calls(runs, tmp_path / "acc.png")).size[0] < 2400
    trace = [{"round": r, "gap_index": 1.0 / (r + 1), "simple_regret": 0.1} for r in range(30)]
    convergence_plot({f"m{i}": trace for i in range(12)}, tmp_path / "conv.png")
    assert (tmp_path / "conv.png").stat().st_size > 5000
    from reports.plots import _style

    assert len({(str(_style(i)["color"]), _style(i)["linestyle"], _style(i)["marker"]) for i in range(40)}) == 40


def test_convergence_plot_draws_every_seed_on_a_log_gap_axis_with_the_threshold(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    import reports.plots as plots

    figures, close = [], plt.close
    monkeypatch.setattr(plots.plt, "close", figures.append)  # keep the figure to look at what was drawn

    def trace(scale):
        return [{"round": r, "gap_index": scale / r, "simple_regret": 0.1} for r in range(1, 20)] + [
            {"summary": True, "settings": {"epsilon": 0.1}}]

    plots.convergence_plot({"case": [trace(1.0), trace(2.0)], "dearicl": trace(3.0)}, tmp_path / "c.png")
    gap_ax, regret_ax = figures[0].axes
    assert gap_ax.get_yscale() == "log" and len(regret_ax.get_lines()) == 3  # two seeds of case, one of dearicl
    *fits, threshold = gap_ax.get_lines()
    assert len(fits) == 3 and list(threshold.get_ydata()) == [0.1, 0.1]
    assert fits[0].get_color() == fits[1].get_color() != fits[2].get_color()  # a method's seeds share its style
    assert gap_ax.get_legend_handles_labels()[1] == ["case", "dearicl", "epsilon"]  # one legend entry per method
    close(figures[0])
    negative = trace(1.0)
    negative[-2]["gap_index"] = -0.02  # a gap index can end below 0: kept on a symmetric log axis, not dropped
    plots.convergence_plot({"case": negative}, tmp_path / "n.png")
    assert figures[1].axes[0].get_yscale() == "symlog"
    close(figures[1])


def test_latex_tables_use_booktabs_with_captions_and_labels(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.4, 20)
    _make_run(tmp_path, {"zero-shot": base, "good": base + 0.3})
    write_report(tmp_path, baseline="zero-shot")
    tex = (tmp_path / "report.tex").read_text()
    assert "\\hline" not in tex
    floats = tex.count("\\begin{table}")
    assert floats >= 4 and floats == tex.count("\\caption{") == tex.count("\\label{tab:") == tex.count("\\end{table}")
    assert tex.count("\\toprule") == tex.count("\\bottomrule") == floats
    for label in ("accuracy", "calls", "time", "selection-time"):
        assert f"\\label{{tab:{label}}}" in tex


def test_every_cell_and_header_is_escaped_for_latex_and_marks_are_kept():
    from reports.tables import Tex, latex_escape, table

    text = table([["macro_f1", Tex(r"\\textbf{x}"), "50% & $5 #1 {a} ~^ \\ ±×Δ≤"]],
                 ["rules (Acc ×100 [95% CI], n = 100)", "b", "c"], "latex")
    assert r"macro\_f1" in text and r"\textbf{x}" in text and r"95\% CI" in text and r"$\times$100" in text
    assert r"50\% \& \$5 \#1 \{a\} \textasciitilde{}\textasciicircum{} \textbackslash{}" in text
    assert latex_escape("±×Δ≤") == r"$\pm$$\times$$\Delta$$\leq$" and latex_escape(Tex("%")) == "%"
    assert "macro_f1" in table([["macro_f1"]], ["50%"], "github")  # Markdown is left as it is


@pytest.mark.skipif(__import__("shutil").which("pdflatex") is None, reason="pdflatex is not installed (CI installs it)")
def test_every_committed_study_report_tex_compiles():
    from latexcheck import latex_errors

    files = sorted((ROOT / "studies").rglob("*.tex"))
    assert len(files) >= 29
    failed = {str(f.relative_to(ROOT)): latex_errors(f) for f in files}
    assert {f: e for f, e in failed.items() if e is not None} == {}


def test_report_aggregates_seeds_with_mean_sd_and_count(tmp_path, capsys):
    scores = {0: ([1, 1, 0, 1], [0, 0, 0, 1]), 1: ([1, 0, 0, 1], [0, 1, 0, 1]), 2: ([1, 1, 1, 1], [0, 0, 0, 0])}
    folders = []
    for seed, (good, base) in scores.items():
        out = tmp_path / f"seed{seed}"
        _make_run(out, {"zero-shot": base, "knn": good})
        results = json.loads((out / "results.json").read_text())
        results["config"] = {"tasks": ["gsm8k"], "seed": seed, "k": 5}
        (out / "results.json").write_text(json.dumps(results))
        folders.append(str(out))
    merged = tmp_path / "seeds.md"
    assert main(["report", *folders, "--out", str(merged)]) == 0
    text = merged.read_text()
    knn = next(line for line in text.splitlines() if line.startswith("| knn"))
    means = [np.mean(good) for good, _ in scores.values()]
    assert f"{100 * np.mean(means):.2f} ± {100 * np.std(means, ddof=1):.2f} (3)" in knn
    assert "fake (3 seeds): gsm8k" in text


def test_study_convergence_table_has_the_bandit_fits_and_not_a_fit_whose_summary_counts_other_rounds(tmp_path):
    from bench.cli import main

    scores = np.linspace(0.5, 0.7, 10)
    bandit = [{"round": 1, "gap_index": 0.5}, {"summary": True, "rounds": 4, "pulls": 9, "stopped_by": "gap"}]
    udr = [{"summary": True, "rounds": 3, "epochs": 10, "queries_scored": 50}]  # mining rounds, no pulls
    study = tmp_path / "study"
    _make_run(study / "rq2-wmt19-seed0", {"case-static": scores, "udr": scores}, task="wmt19",
              selection_calls={"case-static": 90, "udr": 2573}, traces={"case-static": bandit, "udr": udr})
    assert main(["report", str(study)]) == 0
    convergence = (study / "report.md").read_text().split("## Bandit convergence")[1].split("## ")[0]
    rows = [line for line in convergence.splitlines() if line.startswith("| rq2")]
    assert len(rows) == 1 and "case-static" in rows[0] and "| 90 " in rows[0] and "| gap" in rows[0]
    assert [row["method"] for row in json.loads((study / "results.json").read_text())["convergence"]] == ["case-static"]


def test_study_scores_table_has_a_row_per_task_part_and_method_with_the_runs_own_test(tmp_path):
    from bench.cli import main

    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.4, 40)
    noise = rng.normal(0, 0.05, 40)
    study = tmp_path / "study"
    # one seed of a part with the LTR data variant, which a merged table used to drop
    _make_run(study / "rq2-wmt19-seed0", {"case-dynamic": base, "knn": base + 0.2 + noise,
                                           "pirank@dearicl-data": base - 0.2 + noise}, task="wmt19")
    for seed in (0, 1):
        _make_run(study / f"rq1-wmt19-seed{seed}", {"case-static": base + 0.01 * seed}, task="wmt19")
    assert main(["report", str(study)]) == 0
    scores = (study / "report.md").read_text().split("## Scores")[1].split("## ")[0]
    rows = {tuple(c.strip() for c in line.split("|")[2:4]): [c.strip() for c in line.split("|")[1:-1]]
            for line in scores.splitlines() if line.startswith("| wmt19")}
    assert set(rows) == {("rq1", "case-static"), ("rq2", "case-dynamic"), ("rq2", "knn"), ("rq2", "pirank@dearicl-data")}
    knn = rows[("rq2", "knn")]
    assert knn[3] == "1" and knn[6].endswith("‡") and knn[7].startswith("[") and knn[8] == f"{100 * (0.2 + noise.mean()):+.2f} (p 0.000)"
    assert rows[("rq2", "pirank@dearicl-data")][6].endswith("⇓") and rows[("rq2", "case-dynamic")][8] == "baseline"
    tex = (study / "report.tex").read_text().split(r"\label{tab:study-scores}")[0]
    assert r"95\% CI" in tex and "‡" not in tex and r"$^\ddagger$" in tex  # LaTeX: % escaped, marks as symbols
    seeds = rows[("rq1", "case-static")]
    assert seeds[3] == "2" and seeds[6] == f"{100 * base.mean() + 0.5:.2f} ± 0.71" and seeds[7] == ""
    # a part without case-dynamic or zero-shot is tested against its first selector, as its report was published
    _make_run(study / "rq1-wmt19-seed2", {"case-static": base, "dearicl-static": base - 0.2 + noise}, task="wmt19")
    assert main(["report", str(study)]) == 0
    assert "Significance baseline: `case-static`" in (study / "rq1-wmt19-seed2" / "report.md").read_text()


def test_accuracy_vs_calls_has_no_empty_log_axis_when_no_method_calls_the_llm_to_select(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reports import plots

    seen = {}
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        seen["axes"] = [(ax.get_xscale(), ax.get_xlim(), ax.get_xlabel()) for ax in fig.axes]
        return original(fig, *args, **kwargs)

    runs = [{"method": m, "task": "sst2", "metric": "accuracy", "score": 0.5 + 0.1 * i, "ci_low": 0.4, "ci_high": 0.9,
             "llm_calls": {"selection": 0, "inference": 10}} for i, m in enumerate(["zero-shot", "knn", "mmr"])]
    plt.Figure.savefig = keep
    try:
        plots.accuracy_vs_calls(runs, tmp_path / "a.png")
        assert seen["axes"] == [("linear", (-0.7, 2.7), "no selection call (methods side by side)")]
        runs[0]["llm_calls"]["selection"] = 40  # one method paid: the log axis and the band beside it
        plots.accuracy_vs_calls(runs, tmp_path / "b.png")
        assert seen["axes"][0][0] == "log"
    finally:
        plt.Figure.savefig = original


def test_the_time_table_shows_the_median_and_marks_a_slow_first_query():
    from reports.tables import time_table

    runs = [{"method": "knn", "task": "sst2", "inference_seconds_per_query": 0.44, "inference_seconds_first": 13.24,
             "inference_seconds_mean": 0.57},
            {"method": "mmr", "task": "sst2", "inference_seconds_per_query": 0.40, "inference_seconds_first": 0.5,
             "inference_seconds_mean": 0.41}]
    text = time_table(runs)
    assert "median" in text and "0.44 (first 13.24)" in text and "0.40 " in text and "first 0.50" not in text
    old = [{"method": "knn", "task": "sst2", "inference_seconds_per_query": 0.6}]  # written before medians
    assert "s / query, mean" in time_table(old)
