"""reports/claims.py: the study's claims computed from its run folders, and the READMEs' blocks checked against them."""
import json
from pathlib import Path

import numpy as np
import pytest

from reports import claims

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "embedded-2026-11"


def test_the_committed_readmes_hold_what_the_run_folders_give():
    """Every claims block of the results page and both READMEs equals what reports.claims computes from the committed
    run folders."""
    assert claims.main([str(STUDY), "--check", str(ROOT / "docs" / "reports.md"), str(STUDY / "README.md"),
                        str(ROOT / "studies" / "tables" / "README.md"), str(ROOT / "README.md")]) == 0


def test_a_number_edited_in_a_block_fails_the_check_and_write_restores_it(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = (ROOT / "docs" / "reports.md").read_text()
    start = text.index("<!-- claims:rq2 -->")
    row = text.index("| `dearicl-dynamic`", start)
    edited = text[:row] + text[row:].replace("12.44", "14.44", 1)  # a better-looking number typed by hand
    readme.write_text(edited)
    assert claims.main([str(STUDY), "--check", str(readme)]) == 1
    assert "stale claims block(s) rq2" in capsys.readouterr().err
    assert claims.main([str(STUDY), "--write", str(readme)]) == 0
    assert readme.read_text() == text


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    assert claims.main([str(tmp_path), "--check", str(ROOT / "docs" / "reports.md")]) == 2
    bad = tmp_path / "R.md"
    bad.write_text("<!-- claims:nope -->\nx\n<!-- /claims -->\n")
    assert claims.main([str(STUDY), "--check", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not the study folder" in err[0] and "unknown claims block 'nope'" in err[1]


def _run(folder: Path, metric: str, rows: dict[str, list[tuple[float, dict]]]):
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"runs": [{"method": m, "task": "wmt19", "metric": metric}
                                                               for m in rows]}))
    with (folder / "records.jsonl").open("w") as fh:
        for m, values in rows.items():
            for i, (score, extra) in enumerate(values):
                fh.write(json.dumps({"method": m, "task": "wmt19", "item_id": f"i{i}", "score": score,
                                     "extra": extra}) + "\n")


def test_a_folder_scored_before_chrf_is_read_by_its_extra(tmp_path):
    """Old WMT19 runs hold BERTScore as score and chrF as an extra; new ones the reverse: both read the same."""
    _run(tmp_path / "old", "bertscore_f1", {"knn": [(0.7, {"chrf": 0.1}), (0.6, {"chrf": 0.2})]})
    _run(tmp_path / "new", "chrf", {"knn": [(0.1, {"bertscore_f1": 0.7}), (0.2, {"bertscore_f1": 0.6})]})
    for name in ("old", "new"):
        assert claims.item_scores(tmp_path / name, "knn", "wmt19", "chrf") == {"i0": 0.1, "i1": 0.2}
        assert claims.item_scores(tmp_path / name, "knn", "wmt19", "bertscore_f1") == {"i0": 0.7, "i1": 0.6}


def test_verdicts_rest_on_the_difference_test_and_the_tost():
    rng = np.random.default_rng(1)
    base = {f"i{i}": v for i, v in enumerate(rng.uniform(0, 1, 400))}
    same = {k: v + rng.normal(0, 0.05) for k, v in base.items()}
    better = {k: v + 0.1 + rng.normal(0, 0.05) for k, v in base.items()}
    noisy = {k: v + rng.normal(0, 0.6) for k, v in base.items()}
    got = {name: claims.compare_items(s, base, 0.02) for name, s in (("same", same), ("better", better),
                                                                    ("noisy", noisy))}
    assert [claims.planned_verdict(got[n]["p"], got[n]["p_tost"], 0.02, got[n]["mdd"])
            for n in ("same", "better", "noisy")] == ["equivalent within the margin", "differs",
                                                      "cannot decide (margin < MDD)"]
    # across seeds: three seeds that agree closely are equivalent; one far seed leaves it undecided
    assert claims.seed_level([0.50, 0.52, 0.51], [0.50, 0.515, 0.505], 0.02)["verdict"] == "equivalent within the margin"
    assert claims.seed_level([0.50, 0.60, 0.40], [0.50, 0.515, 0.505], 0.02)["verdict"] == "cannot decide (margin < MDD)"
    # a TOST that passes with a margin below the design's MDD is not an equivalence (the analysis plan's rule)
    tight = claims.seed_level([0.5, 0.52, 0.48, 0.51, 0.49, 0.5], [0.5] * 6, 0.019)
    assert tight["p_tost"] < 0.05 and tight["mdd"] > 0.019 and tight["verdict"] == "cannot decide (margin < MDD)"
    assert claims.seed_level([0.5, 0.501], [0.5, 0.5005], 0.02)["verdict"] == "cannot decide (no MDD)"  # 2 seeds


def test_zero_one_scores_are_decided_by_mcnemar():
    base = {f"i{i}": 0.0 for i in range(50)}
    four_wins = {**base, **{f"i{i}": 1.0 for i in range(4)}}
    got = claims.compare_items(four_wins, base, 0.05)
    assert got["mcnemar"] and got["p"] == pytest.approx(0.125)  # 4 of 4 discordant pairs; the t-test says 0.044


def test_rq_verdicts_follow_the_plan_paired_by_run_and_per_case_variant(tmp_path):
    """RQ1b/RQ3: DEARICL's rounds and calls against each CASE, Wilcoxon paired by run, Holm over the rows:
    fewer and significant is "supported", more and significant or equal everywhere is "not reproduced"."""
    import json

    rng = np.random.default_rng(0)
    rounds = rng.integers(50, 90, size=30)

    def row(method, rounds, calls, capped=0, eps=0.0):
        return {"method": method, "rounds": [int(x) for x in rounds], "calls": [int(x) for x in calls],
                "stopped_by": {"gap": 30 - capped, **({"max_pulls": capped} if capped else {})}, "eps_error_rate": eps}

    folder = tmp_path / "toy-gemma3-270m"
    folder.mkdir()
    (folder / "rq1-cores.json").write_text(json.dumps({"results": [
        row("case", rounds, rounds * 20, capped=7), row("case-script", rounds - 40, rounds * 20),
        row("dearicl-paper", rounds - 20, rounds * 20, eps=0.9)]}))
    text = claims.rq_block(tmp_path)
    cells = {(c[2], c[3]): c for c in ([x.strip() for x in line.split("|")] for line in text.splitlines()
                                       if line.startswith("| toy"))}
    lines = {key: c[9] for key, c in cells.items()}
    # CASE's runs at the cap are said (their count is a lower bound), and each stop's eps-error stands beside
    assert "(7/30 at the cap)" in cells[("RQ1b: fewer rounds", "`case`")][5]
    assert cells[("RQ1b: fewer rounds", "`case`")][10] == "0.90 / 0.00"
    assert lines[("RQ1b: fewer rounds", "`case`")] == "supported"
    assert lines[("RQ1b: fewer rounds", "`case-script`")] == "not reproduced"  # DEARICL stops later than this CASE
    assert lines[("RQ3: fewer calls", "`case`")] == "not reproduced"  # the same calls in every run


def test_the_demo_block_states_what_the_deciding_test_says_after_holm(tmp_path):
    from test_reports import _make_run

    base = [0] * 40 + [1] * 10
    _make_run(tmp_path, {"zero-shot": base,
                         "knn": [1] * 50,  # 40 discordant pairs, all one way: significant after Holm
                         # 6 discordant pairs one way: McNemar p 0.031 alone, 0.062 after Holm over the three
                         "few-shot": [1] * 6 + [0] * 34 + [1] * 10, "mmr": [0] * 34 + [1] * 16},
              task="sst2")
    block = claims.demo_block(tmp_path)
    assert "Significant against zero-shot after Holm: knn on sst2 (+80.00, Holm p " in block
    assert "Not significant after it: few-shot on sst2 (+12.00, Holm p 0.062); mmr on sst2 (+12.00, Holm p 0.062)" \
        in block
    assert "Holm: few-shot" not in block and "\n```\nmethod" in block


def _page_sources(page: Path) -> str:
    """A page without claims blocks is checked against its own run's generated files (JSON, report.md)."""
    if "<!-- claims:" in page.read_text() or page.parent == ROOT or page.parent.name == "docs":
        return ""
    return " ".join(p.read_text() for p in sorted(page.parent.rglob("report.md")) + sorted(page.parent.rglob("*.json")))


def test_every_page_states_test_results_only_with_numbers_from_its_blocks_or_its_runs():
    """README, docs and every study page: a sentence that states a test result (p, Holm, TOST, McNemar) holds only
    numbers that a generated block of the page, or the page's own run files, give."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "studies").rglob("README.md"))]
    found = {str(p.relative_to(ROOT)): claims.unbacked_numbers(p.read_text(), _page_sources(p)) for p in pages}
    assert len(pages) > 10 and not {p: u for p, u in found.items() if u}


def test_a_stale_number_typed_into_prose_fails_the_check(tmp_path, capsys):
    """A p-value or difference restated by hand, then left behind when the data changed, is named with its line;
    the paper's quoted numbers and numbers outside result sentences are not."""
    text = (ROOT / "studies" / "embedded-2026-11" / "README.md").read_text()
    clean = claims.unbacked_numbers(text)
    assert clean == []
    planted = text.replace("(Δ −0.19 ± 0.73, paired t\n  p = 0.69;", "(Δ −9.87 ± 0.73, paired t\n  p = 0.69;", 1)
    assert planted != text
    line = text[:text.index("(Δ −0.19 ± 0.73, paired t\n  p = 0.69;")].count("\n") + 1
    assert claims.unbacked_numbers(planted) == [(line, ["−9.87"])]
    quoted = text + "\nThe paper reports p = 0.0123 for its gain (Table 1: 68.83 vs 65.40).\n"
    assert [n for _, n in claims.unbacked_numbers(quoted)] == [["0.0123"]]
    page = tmp_path / "README.md"
    page.write_text(planted)
    assert claims.main([str(STUDY), "--check", str(page)]) == 1
    assert f"{page}:{line}: prose states a test result with −9.87" in capsys.readouterr().err


def test_a_stated_row_run_under_an_earlier_definition_is_marked_and_not_counted(tmp_path):
    """A stated-settings row whose stored setting differs from the sweep's present definition (e.g. run before the
    network was added) is shown as such and gets no verdict."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from knob_sweep import STATED_SETTINGS

    label = "stated, 1 epoch a round (l.396), c_t constant"
    env = {"runs": 2, "n_val": 20}
    row = {"rounds": [3, 90], "mean_rounds": 46.5, "rounds_se": 43.5, "mean_calls": 100, "eps_error_rate": 0.0,
           "eps_error_ucb95": 0.78, "env": env}
    folder = tmp_path / "toy-gemma3-270m"
    (folder / "sweep-stated").mkdir(parents=True)
    (folder / "sweep-stated" / "sweep.json").write_text(json.dumps({label: {**row, "neural": STATED_SETTINGS[label]}}))
    assert not claims.stale_setting(label, {"neural": STATED_SETTINGS[label]})
    assert "not counted" not in claims.stated_block(folder)
    (folder / "sweep-stated" / "sweep.json").write_text(json.dumps({label: {**row, "neural": "log_k=arms"}}))
    assert claims.stale_setting(label, {"neural": "log_k=arms"})
    text = claims.stated_block(folder)
    assert "(run under an earlier definition of the setting)" in text and "not counted" in text
