"""scripts/certification_tables.py: the paired pull ratios the fixed-set and population goals are read from."""
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

spec = importlib.util.spec_from_file_location("certification_tables",
                                              Path(__file__).parents[1] / "scripts/certification_tables.py")
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)


def row(method, pulls, calls=None):
    made = {"method": method, "runs": len(pulls), "pulls": pulls, "mean_pulls": float(np.mean(pulls)),
            "eps_error_rate": 0.0, "coverage": 1.0, "stopped_by": {"certified": len(pulls)}}
    if calls is not None:
        made["mean_calls"] = float(np.mean(calls))
    return made


def test_the_ratio_is_of_the_mean_pulls_on_the_same_instances_with_a_paired_interval():
    rng = np.random.default_rng(0)
    base = rng.integers(300, 600, 40).astype(float)
    ours = np.round(0.7 * base + rng.normal(0, 5, 40))
    text = tables.paired_ratio(row("lucb-pp", ours.tolist()), row("lucb", base.tolist()))
    point, low, high = (float(x) for x in text.replace("(", "").replace(")", "").replace("-", " ").split())
    assert point == pytest.approx(ours.mean() / base.mean(), abs=0.0005)
    assert low <= point <= high and high - low < 0.05  # paired: the instances' spread cancels
    # without per-run calls (runs saved before they were kept): the ratio of the means, no interval
    assert tables.paired_ratio(row("a", [1, 2], calls=[30, 50]), row("b", [2, 2], calls=[80, 80]), "calls") == "0.500"
    with pytest.raises(ValueError, match="ran different instances"):
        tables.paired_ratio(row("a", [1.0, 2.0, 3.0]), row("b", [1.0, 2.0]))


def test_the_variant_tables_set_each_variant_beside_its_baseline(tmp_path):
    base = [400.0, 500.0, 450.0, 520.0]
    family = {"results": [row("lucb", base), row("lucb-kl", [900.0] * 4),
                          {**row("lucb-quantile", [100.0, 120.0, 140.0, 110.0]), "mean_simple_regret": 0.05}]}
    variants = {"results": [row("lucb-pp", [300.0, 380.0, 350.0, 390.0]), row("lucb-wider", [380.0, 470.0, 430.0, 500.0]),
                            row("lucb-pp-wider", [290.0, 370.0, 330.0, 380.0])]}
    (tmp_path / "nonlinear.json").write_text(json.dumps(family))
    (tmp_path / "nonlinear-lucb-variants.json").write_text(json.dumps(variants))
    quantile = {"results": [{**row("lucb-quantile-pp", [60.0, 70.0, 80.0, 64.0]), "mean_simple_regret": 0.06}]}
    (tmp_path / "nonlinear-quantile-pp.json").write_text(json.dumps(quantile))
    text = tables.tables(tmp_path)
    line = [x for x in text.splitlines() if x.startswith("| nonlinear |")][-1]  # the variants' table
    assert "| 355; 0/4; 1.000 |" in line and line.count("(") == 3 and "0.759 (" in line  # 1420 / 1870
    quantile_line = [x for x in text.splitlines() if x.startswith("| nonlinear (SIMULATED) |")][0]
    assert "| 118; 0/4; 1.000 | 68; 0/4; 1.000 | 0.583 (" in quantile_line and "| 0.050 / 0.060 |" in quantile_line


def test_the_readme_block_is_what_the_committed_study_gives():
    """dearicl/README.md's certification tables equal what the script computes from the committed study's JSONs: a
    number there cannot drift from its runs (rewrite with `python scripts/certification_tables.py`)."""
    root = Path(__file__).parents[1]
    text = (root / "dearicl" / "README.md").read_text()
    block = text.split("<!-- certification-study:start -->\n", 1)[1].split("\n<!-- certification-study:end -->", 1)[0]
    assert block == tables.tables(root / "studies" / "bandit" / "certification")


def test_the_close_arms_table_judges_each_method_against_delta_on_both_bounds(tmp_path):
    """A method meets the close-arms goal only when eps-error's 95% upper bound is <= delta and the every-round event
    rate's 95% lower bound is >= 1 - delta; one that never stopped certified has nothing to judge."""
    def judged(method, errors_ucb, event_lcb, stops):
        return {**row(method, [500.0] * 100), "delta": 0.05, "eps_error_ucb95": errors_ucb, "event_rate": 1.0,
                "event_rate_lcb95": event_lcb, "stopped_by": stops}
    part = {"results": [judged("lucb", 0.030, 0.970, {"certified": 100}),
                        judged("lucb-kl", 0.030, 0.970, {"max_pulls": 100}),
                        judged("lucb-paired", 0.080, 0.970, {"certified": 100}),
                        judged("lucb-quantile", 0.030, 0.937, {"certified": 100})]}
    (tmp_path / "close-arms.json").write_text(json.dumps(part))
    lines = {x.split(" |")[0]: x for x in tables.tables(tmp_path).splitlines() if x.startswith("| `")}
    assert lines["| `lucb`"].endswith("| yes |")
    assert lines["| `lucb-kl`"].endswith("| no certificate to judge |")
    assert lines["| `lucb-paired`"].endswith("| no |") and lines["| `lucb-quantile`"].endswith("| no |")
    assert "| not run |" in lines["| `dearicl-pac`"]


def test_the_split_table_sets_each_one_sided_split_beside_its_uniform_split_on_the_same_instances(tmp_path):
    """LUCB++'s split (`-pp`) against the uniform split it tightens: each family's parts join by name, a table's
    population parts too, and the ratio is of the same instances' pulls."""
    (tmp_path / "slots.json").write_text(json.dumps({"results": [row("lucb-paired", [400.0, 500.0, 600.0])]}))
    (tmp_path / "slots-paired-pp.json").write_text(json.dumps({"results": [row("lucb-paired-pp", [300.0, 400.0, 500.0])]}))
    (tmp_path / "slots-pac.json").write_text(json.dumps({"results": [row("dearicl-pac", [200.0, 200.0, 200.0])]}))
    (tmp_path / "slots-pac-pp.json").write_text(json.dumps({"results": [row("dearicl-pac-pp", [100.0, 100.0, 100.0])]}))
    (tmp_path / "table-trec-population.json").write_text(json.dumps({"results": [row("lucb-paired-wor", [80.0, 90.0])]}))
    (tmp_path / "table-trec-paired-pp.json").write_text(json.dumps({"results": [row("lucb-paired-pp-wor", [40.0, 45.0])]}))
    text = tables.tables(tmp_path)
    slots = [x for x in text.splitlines() if x.startswith("| slots (SIMULATED) | 500")][0]
    assert "| 500; 0/3; 1.000 | 400; 0/3; 1.000 | 0.800 (" in slots and slots.endswith("| 200; 0/3; 1.000 | 100; 0/3; 1.000 | 0.500 |")
    trec = [x for x in text.splitlines() if x.startswith("| trec (RECORDED, population protocol) |")][0]
    assert "| 85; 0/2; 1.000 | 42; 0/2; 1.000 | 0.500 |" in trec  # proportional pulls: the point, no NaN interval
    assert not [x for x in text.splitlines() if x.startswith("| nonlinear (SIMULATED) |") and "pp" in x]  # none run


@pytest.mark.parametrize("tuning", ["tuning", "tuning-2", "plugin"])
def test_the_pre_registered_measurements_and_the_readme_figures_are_what_the_committed_runs_give(tuning):
    """Each MEASURED.md family row's ratio is the paired ratio of the committed runs (the chosen setting's against
    lucb's), and dearicl/README.md cites them (the first measurement as a range and difficulty's, the others one by
    one)."""
    root = Path(__file__).parents[1]
    study = root / "studies" / "bandit" / "certification"
    measured = (study / tuning / "MEASURED.md").read_text()
    readme = (root / "dearicl" / "README.md").read_text()
    points = {}
    for family in ("difficulty", "nonlinear", "slots", "pairwise", "order", "latent"):
        ours = json.loads((study / tuning / f"measure-{family}.json").read_text())["results"][0]
        base = next(r for r in json.loads((study / f"{family}.json").read_text())["results"] if r["method"] == "lucb")
        ratio = tables.paired_ratio(ours, base)
        assert f"| {family} | {base['mean_pulls']:.0f} | {ours['mean_pulls']:.0f} | {ratio} |" in measured
        points[family] = ratio.split()[0]
    flat = " ".join(readme.split())
    cited = points if tuning != "tuning" else {"difficulty": points.pop("difficulty")}
    for family, point in cited.items():  # "0.750 (0.746-0.754) on `nonlinear`", "0.741 on `slots`"
        assert re.search(rf"{re.escape(point)}( \([^)]*\))? on `{family}`", flat), (family, point)
    if tuning == "tuning":  # the five met families as one range
        assert f"{min(points.values())}-{max(points.values())}x" in flat
    if tuning == "plugin":  # the recorded tables as one range
        table_points = []
        for part in sorted((study / tuning).glob("measure-table-*.json")):
            name = part.stem.removeprefix("measure-table-")
            ours = json.loads(part.read_text())["results"][0]
            base = next(r for r in json.loads((root / "studies" / "tables" / f"{name}-gemma3-270m" /
                                               "certified-fixed-set.json").read_text())["results"] if r["method"] == "lucb")
            table_points.append(tables.paired_ratio(ours, base).split()[0])
        assert len(table_points) == 7 and f"{min(table_points)}-{max(table_points)}x `lucb`'s pulls" in flat
