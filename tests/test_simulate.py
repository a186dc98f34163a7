"""`python -m bench simulate`: SIMULATED environments with known truth."""
import dataclasses
import json

import numpy as np
import pytest

from bench.cli import main


def write_csv(path, rows):
    path.write_text("\n".join(",".join(str(v) for v in r) for r in rows) + "\n")


def test_linear_mode_is_pac_on_a_separated_instance(tmp_path, capsys):
    feats = tmp_path / "arms.csv"
    write_csv(feats, [[1, 0, 0], [0.9, 0.1, 0], [0.5, 0, 0.3], [0, 1, 0], [0, 0, 1], [0.1, 0.2, 0.1]])
    out = tmp_path / "sim.json"
    code = main(["simulate", "--env", "linear", "--features-csv", str(feats), "--theta", "1,0,0", "--noise", "0.5",
                 "--methods", "case", "--m", "2", "--delta", "0.05", "--epsilon", "0", "--beta", "heuristic",
                 "--runs", "20", "--seed", "0", "--out", str(out), "--plot", str(tmp_path / "sim.png"),
                 "--no-progress"])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["env"]["simulated"] is True and data["env"]["name"] == "linear"
    res = data["results"][0]
    assert res["method"] == "case" and res["runs"] == 20 and len(res["pulls"]) == 20
    assert res["error_rate"] <= 0.05 and res["mean_simple_regret"] == pytest.approx(0.0, abs=1e-9)
    assert res["mean_pulls"] == pytest.approx(np.mean(res["pulls"]))
    assert res["stopped_by"] == {"gap": 20}
    assert (tmp_path / "sim.png").stat().st_size > 1000
    assert "SIMULATED environment 'linear'" in capsys.readouterr().out


def test_custom_reward_module(tmp_path, data_dir):
    module = tmp_path / "my_reward.py"
    module.write_text(
        "import numpy as np\n"
        "def reward(query_embedding, demo_embeddings, rng):\n"
        "    # relevance of the best demonstration, plus noise\n"
        "    return float(np.clip(np.max(demo_embeddings @ query_embedding) + rng.normal(0, 0.05), 0, 1))\n")
    out = tmp_path / "sim.json"
    code = main(["simulate", "--env", "custom", "--reward-module", str(module), "--data-dir", str(data_dir),
                 "--task", "aquarat", "--pool-size", "60", "--n-arms", "24", "--n-val", "5", "--m", "3",
                 "--challengers", "2", "--budget", "12", "--runs", "2", "--methods", "case,dearicl,lucb",
                 "--truth-samples", "8", "--out", str(out), "--no-progress"])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["env"]["name"] == "custom" and data["env"]["simulated"]
    assert data["env"]["cs"] == "query-bernstein"  # the default sequence of lucb and dearicl-pac, recorded
    for res in data["results"]:
        assert all(p <= 12 for p in res["pulls"]) and 0.0 <= res["error_rate"] <= 1.0
        assert res["mean_simple_regret"] >= -1e-9
    assert set(data["traces"]) == {"case", "dearicl", "lucb"}
    lucb = next(r for r in data["results"] if r["method"] == "lucb")
    assert lucb["pulls"] == [12, 12] and lucb["stopped_by"] == {"max_pulls": 2}  # 24 arms: the budget ends first


@pytest.mark.parametrize("args, message", [
    (["--env", "linear", "--theta", "1,0"], "--env linear needs --features-csv"),
    (["--env", "linear", "--features-csv", "nope.csv", "--theta", "1"], "features file not found"),
    (["--env", "custom", "--reward-module", "missing.py"], "reward module not found"),
    (["--env", "linear", "--methods", "dearicl"], "needs query embeddings"),
    (["--env", "linear", "--methods", "lucb"], "needs rewards in [0, 1]"),
    (["--env", "linear", "--protocol", "population"], "--protocol population samples a finite pool"),
    (["--env", "nonlinear", "--protocol", "population"], "give --batch below it"),
    (["--env", "nonlinear", "--protocol", "population", "--n-val", "20", "--batch", "20"], "give --batch below it"),
    (["--env", "nonlinear", "--methods", "lucb-wor"], "add --protocol population"),
    (["--env", "nonlinear", "--lookahead", "0.5"], "--lookahead must be finite and >= 1, got 0.5"),
    (["--env", "nonlinear", "--lookahead", "inf"], "--lookahead must be finite and >= 1, got inf"),
])
def test_simulate_bad_input(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", *args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_simulate_unknown_confidence_sequence_exits_2(capsys):
    assert main(["simulate", "--env", "nonlinear", "--cs", "hoeffding", "--no-progress"]) == 2
    assert "invalid choice: 'hoeffding'" in capsys.readouterr().err


def test_mismatched_theta(tmp_path, capsys):
    feats = tmp_path / "f.csv"
    write_csv(feats, [[1, 0], [0, 1], [1, 1]])
    assert main(["simulate", "--env", "linear", "--features-csv", str(feats), "--theta", "1,0,0", "--m", "1"]) == 2
    assert "features have 2 columns but theta has 3 entries" in capsys.readouterr().err


def test_family_run_reports_every_metric_with_standard_errors(tmp_path, data_dir):
    out = tmp_path / "sim.json"
    code = main(["simulate", "--env", "order", "--methods", "all", "--data-dir", str(data_dir), "--task", "aquarat",
                 "--pool-size", "60", "--n-arms", "24", "--n-val", "5", "--m", "3", "--challengers", "2",
                 "--budget", "40", "--runs", "2", "--out", str(out), "--scatter", str(tmp_path / "scatter.png"),
                 "--plot", str(tmp_path / "conv.png"), "--no-progress"])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["env"]["instances"] == "one per run" and data["env"]["simulated"]
    methods = [r["method"] for r in data["results"]]
    assert methods == ["case", "case-script", "dearicl", "dearicl-random", "dearicl-cal0", "dearicl-paper-schedule",
                       "dearicl-mc-mean", "dearicl-paper", "lucb", "lucb-kl", "lucb-pp", "lucb-pp-wider", "lucb-wider", "lucb-pp-plugin",
                       "lucb-quantile",
                       "lucb-quantile-pp", "lucb-paired", "lucb-paired-pp", "dearicl-pac", "dearicl-pac-pp",
                       "dearicl-pac-model"]
    for res in data["results"]:
        assert len(res["pulls"]) == 2 and all(p <= 40 for p in res["pulls"])
        assert res["mean_pulls"] == pytest.approx(np.mean(res["pulls"]))
        assert res["pulls_se"] == pytest.approx(np.std(res["pulls"], ddof=1) / np.sqrt(2))
        assert res["simple_regret_se"] >= 0 and res["eps_error_rate_se"] >= 0
        assert 0.0 <= res["coverage"] <= 1.0 and len(res["coverage_per_run"]) == 2, res["method"]
        # the rate the guarantee bounds: runs whose event held at every round, never above the share of rounds
        assert res["event_runs"] == 2 and res["event_rate"] <= res["coverage"] + 1e-12, res["method"]
        assert 0.0 <= res["event_rate_lcb95"] <= res["event_rate"]
    quantile = {r["method"]: r for r in data["results"]}["lucb-quantile"]
    assert quantile["sampling_miss_rate"] == 0.0  # 24 arms, all sampled: the top rho is in the sample
    settings = {r["method"]: r["settings"] for r in data["results"]}
    assert settings["dearicl-cal0"] == {"calibration": 0.0}
    assert settings["dearicl-paper-schedule"] == {"epochs_per_round": 1, "lr": 1e-4}
    assert settings["dearicl-pac"] == {"stop": "sequences"} and settings["dearicl-pac-model"] == {"stop": "model"}
    assert settings["dearicl-pac-pp"] == {"stop": "sequences", "split": "lucb++"}
    assert settings["lucb-paired-pp"] == {"cs": "query-bernstein", "split": "lucb++"}
    assert settings["lucb"] == {} and settings["lucb-kl"] == {"cs": "kl"}
    assert settings["lucb-pp"] == {"split": "lucb++"} and settings["lucb-wider"] == {"sampling": "wider"}
    assert settings["lucb-pp-plugin"] == {"cs": "query-plugin", "split": "lucb++", "sampling": "wider"}
    assert settings["lucb-quantile"] == {"rho": 0.1, "m": 1, "arms_sampled": 24}  # 37 > 24 arms: every arm
    assert settings["lucb-quantile-pp"] == {"split": "lucb++", "sampling": "wider", "rho": 0.1, "m": 1, "arms_sampled": 24}
    assert (tmp_path / "scatter.png").stat().st_size > 1000 and (tmp_path / "conv.png").stat().st_size > 1000


def test_family_noise_out_of_range_is_refused_before_any_model_loads(capsys):
    assert main(["simulate", "--env", "latent", "--noise", "0.7", "--no-progress"]) == 2
    assert "--noise must be in (0, 0.5)" in capsys.readouterr().err


def test_population_protocol_on_a_family_certifies_the_realized_pool_and_pairing_cancels_its_difficulty(tmp_path,
                                                                                                         data_dir):
    """The difficulty family's shared per-query difficulty is noise to a per-arm sequence on random batches, and
    cancels in a paired difference on the same batch: lucb-paired-wor must certify in fewer pulls than lucb-wor."""
    out = tmp_path / "pop.json"
    code = main(["simulate", "--env", "difficulty", "--protocol", "population", "--methods", "all",
                 "--data-dir", str(data_dir), "--task", "aquarat", "--pool-size", "60", "--n-arms", "12",
                 "--n-val", "200", "--batch", "10", "--m", "2", "--epsilon", "0.05", "--runs", "3",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["env"]["protocol"] == "population" and data["env"]["batch"] == 10 and data["env"]["simulated"]
    rows = {r["method"]: r for r in data["results"]}
    # 'all' under the population protocol: the wor sequences
    assert set(rows) == {"lucb-wor", "lucb-pp-wor", "lucb-pp-wider-wor", "lucb-paired-wor", "lucb-paired-pp-wor"}
    for row in rows.values():
        assert row["simulated"] and row["eps_error_rate"] == 0.0 and row["coverage"] == 1.0
        assert row["stopped_by"] == {"certified": 3}, row
    from reports.simulated import family_table
    header = family_table(list(rows.values())).splitlines()[0]
    assert "distinct rewards" in header and "LLM calls" not in header  # SIMULATED: no LLM was called
    assert rows["lucb-paired-wor"]["mean_pulls"] < 0.8 * rows["lucb-wor"]["mean_pulls"], \
        (rows["lucb-paired-wor"]["pulls"], rows["lucb-wor"]["pulls"])


def test_no_table_help_or_summary_calls_a_model_stop_a_certificate(capsys):
    """dearicl-pac runs made before its certified stop, and dearicl-pac-model, stopped on the model's intervals:
    the study tables, the help and the printed summary say so, and never "certified"."""
    import re
    from pathlib import Path

    from reports.simulated import MODEL_STOP, by_family, stops_label, study_markdown

    root = Path(__file__).parents[1]
    old = {"method": "dearicl-pac", "settings": {}, "stopped_by": {"certified": 20}}
    assert stops_label(old) == f"{MODEL_STOP} 20"
    assert stops_label({"method": "dearicl-pac-model", "settings": {"stop": "model"},
                        "stopped_by": {"model-stop": 3, "max_pulls": 1}}) == f"{MODEL_STOP} 3, max_pulls 1"
    assert stops_label({"method": "dearicl-pac", "settings": {"stop": "sequences"},
                        "stopped_by": {"certified": 5}}) == "certified 5"
    # the committed study tables are what their JSONs give (so stops_label labelled every row), and no
    # dearicl-pac-model row anywhere reads "certified"
    study = root / "studies" / "bandit"
    paths = sorted(study.glob("*-gap-index.json")) + sorted(study.glob("*-certified.json")) \
        + sorted(study.glob("*-ablations.json"))
    assert (study / "tables.md").read_text() == study_markdown(*by_family(paths)) + "\n"
    certification = sorted((study / "certification").glob("*.json"))
    assert (study / "certification" / "tables.md").read_text() == study_markdown(*by_family(certification)) + "\n"
    for table in root.glob("**/*.md"):
        for line in table.read_text().splitlines():
            if re.match(r"\|\s*`?dearicl-pac-model`?\s*\|", line):
                assert not re.search(r"\bcertified \d", line), (table, line)
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    help_text = re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))  # argparse wraps at hyphens
    assert "dearicl-pac-model stops on its model's intervals: NOT a certificate" in help_text


def test_a_custom_truth_is_exact_with_expected_and_judged_only_when_precise_enough(tmp_path, data_dir, capsys):
    """A reward module's expected() gives the exact truth; without it the truth is an average of draws, with each
    arm's standard error reported; a truth coarser than epsilon / 10 marks eps-error, coverage and the event rate
    "not judged"; --truth-samples auto draws until it is fine enough."""
    from reports.simulated import NOT_JUDGED, family_table

    body = ("import numpy as np\n"
            "def expected(query_embedding, demo_embeddings):\n"
            "    return float(np.clip(0.5 + 0.3 * np.mean(demo_embeddings @ query_embedding), 0, 1))\n"
            "def reward(query_embedding, demo_embeddings, rng):\n"
            "    return float(np.clip(expected(query_embedding, demo_embeddings) + rng.normal(0, 0.3), 0, 1))\n")
    common = ["simulate", "--env", "custom", "--data-dir", str(data_dir), "--task", "aquarat", "--pool-size", "60",
              "--n-arms", "12", "--n-val", "5", "--m", "2", "--epsilon", "0.05", "--budget", "40", "--runs", "2",
              "--methods", "lucb", "--no-progress"]
    hidden = body.replace("expected(", "mean_reward(")  # the same landscape, with no expected() to read
    results = {}
    for name, text, samples in (("exact", body, "8"), ("coarse", hidden, "8"), ("auto", hidden, "auto")):
        module = tmp_path / f"{name}.py"
        module.write_text(text)
        out = tmp_path / f"{name}.json"
        assert main([*common, "--reward-module", str(module), "--truth-samples", samples, "--out", str(out)]) == 0
        results[name] = json.loads(out.read_text())
    exact, coarse, auto = (results[n]["env"] for n in ("exact", "coarse", "auto"))
    assert exact["truth"] == "exact (expected)" and exact["truth_se_max"] == 0.0 and exact["truth_judges"]
    # 8 draws of sd ~0.3 on 5 queries: an arm's SE ~0.04, far above 0.005
    assert coarse["truth"] == "estimated: 8 draws per (arm, query)" and coarse["truth_se_max"] > 0.005
    assert not coarse["truth_judges"] and results["coarse"]["results"][0]["judged"] is False
    assert auto["truth_se_max"] < 0.005 and auto["truth_judges"] and "judged" not in results["auto"]["results"][0]
    assert "NOT JUDGED" in capsys.readouterr().out
    assert family_table(results["coarse"]["results"]).count(NOT_JUDGED) == 4  # eps-error, error, coverage, event


def test_every_surrogate_setting_the_paper_states_is_the_configs_in_simulate_the_sweep_and_the_replay():
    """configs/paper.yaml holds each stated value with its line; `dearicl-paper` (bench simulate), the knob sweep's
    stated row (one epoch, c_t constant) and the table study's replay of `dearicl-static:paper` run exactly those."""
    import dataclasses
    import importlib.util
    import re
    from pathlib import Path

    import yaml

    from bench.simulate import SIM_METHODS, parse_neural
    from dearicl.surrogates import NeuralConfig

    root = Path(__file__).parents[1]
    star = yaml.safe_load((root / "configs" / "paper.yaml").read_text())["params"]["*"]
    keys = ["epochs_per_round", "lr", "batch_size", "log_k", "estimate", "width_schedule", "hidden"]

    def surrogate(overrides: dict) -> dict:  # every key, the defaults filled in, lists as the config's tuples
        config = dataclasses.replace(NeuralConfig(), **{k: tuple(v) if k == "hidden" else v for k, v in overrides.items()})
        return {k: getattr(config, k) for k in keys}

    stated = surrogate({k: star[k] for k in keys})
    assert stated["hidden"] == (256, 256, 128, 64) and stated["log_k"] == "arms"  # the config itself still says so
    assert surrogate(SIM_METHODS["dearicl-paper"].neural) == stated
    spec = importlib.util.spec_from_file_location("knob_sweep", root / "scripts" / "knob_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert surrogate(parse_neural(sweep.STATED_SETTINGS["stated, 1 epoch a round (l.396), c_t constant"])) == stated
    script = (root / "scripts" / "table_study.sh").read_text()
    replay = {key: yaml.safe_load(value) for key, value in re.findall(r'"dearicl-static:paper\.(\w+)=([^"]+)"', script)}
    assert surrogate(replay) == stated


def test_a_checkpoint_takes_finished_runs_back_and_a_resumed_row_equals_one_run_whole(tmp_path, data_dir):
    """A row of slow runs (the paper's 100 epochs a round: about an hour a run) finishes over several sittings: each
    finished run is appended to --checkpoint, and a rerun computes only the runs it lacks, with the same results."""
    ckpt = tmp_path / "runs.jsonl"

    def simulate(out, runs, *extra):
        code = main(["simulate", "--env", "order", "--methods", "dearicl,lucb-quantile,dearicl-pac", "--data-dir",
                     str(data_dir), "--task", "aquarat", "--pool-size", "60", "--n-arms", "24", "--n-val", "5", "--m",
                     "3", "--challengers", "2", "--budget", "40", "--runs", str(runs), "--out", str(tmp_path / out),
                     "--no-progress", *extra])
        assert code == 0
        return json.loads((tmp_path / out).read_text())

    def lines():
        return [json.loads(line) for line in ckpt.read_text().splitlines()]

    def same(row):  # what a row reports, less the time its runs took
        return {k: v for k, v in row.items() if k != "mean_seconds"}

    whole = simulate("whole.json", 3)
    simulate("first.json", 2, "--checkpoint", str(ckpt))
    assert len(lines()) == 6 and {e["run"] for e in lines()} == {0, 1}
    from bench.provenance import float_path  # each run names the machine whose floats it holds (dearicl loads torch)
    assert {e["machine"] for e in lines()} == {float_path()} and "torch 2." in float_path()
    with ckpt.open("a") as f:
        f.write('{"key": "cut by a kill')  # half a line: its run is computed again
    resumed = simulate("resumed.json", 3, "--checkpoint", str(ckpt))
    fresh = [json.loads(line) for line in ckpt.read_text().splitlines()[7:]]
    assert sorted(e["run"] for e in fresh) == [2, 2, 2]  # only the run it lacked, once a method
    assert [same(r) for r in resumed["results"]] == [same(r) for r in whole["results"]]
    untimed = {m: [{k: v for k, v in step.items() if "seconds" not in k} for step in trace]
               for m, trace in whole["traces"].items()}
    assert {m: [{k: v for k, v in step.items() if "seconds" not in k} for step in trace]
            for m, trace in resumed["traces"].items()} == untimed
    again = simulate("again.json", 3, "--checkpoint", str(ckpt))  # nothing left to compute
    assert len(ckpt.read_text().splitlines()) == 10
    assert [same(r) for r in again["results"]] == [same(r) for r in whole["results"]]
    other = simulate("other.json", 1, "--checkpoint", str(ckpt), "--budget", "30")  # other settings: none taken back
    assert len(ckpt.read_text().splitlines()) == 13
    assert all(p <= 30 for r in other["results"] for p in r["pulls"])
    from bench import simulate as sim  # a method whose definition was edited (as dearicl-paper's was): none taken back

    edited = dataclasses.replace(sim.SIM_METHODS["dearicl"], neural={"mc_draws": "per-round"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sim.SIM_METHODS, "dearicl", edited)
        simulate("edited.json", 1, "--checkpoint", str(ckpt))
    added = [json.loads(line) for line in ckpt.read_text().splitlines()[13:]]
    assert [e["run"] for e in added] == [0]  # dearicl's run 0 again; lucb-quantile and dearicl-pac taken back


def test_neural_overrides_reach_every_neural_method_dearicl_pac_included(tmp_path, data_dir, monkeypatch):
    """--neural is applied to the surrogate of each DEARICL method, dearicl-pac's too (its row's settings report it)."""
    from bench import simulate as sim

    built = []

    class Spy(sim.NeuralSurrogate):
        def __init__(self, *args, config, **kwargs):
            built.append(config)
            super().__init__(*args, config=config, **kwargs)

    monkeypatch.setattr(sim, "NeuralSurrogate", Spy)
    code = main(["simulate", "--env", "order", "--methods", "dearicl,dearicl-pac", "--data-dir", str(data_dir), "--task",
                 "aquarat", "--pool-size", "60", "--n-arms", "24", "--n-val", "5", "--m", "3", "--challengers", "2",
                 "--budget", "20", "--runs", "1", "--neural", "hidden=8,mc_passes=16", "--out", str(tmp_path / "o.json"),
                 "--no-progress"])
    assert code == 0 and len(built) == 2
    assert all(c.hidden == (8,) and c.mc_passes == 16 for c in built)
    rows = json.loads((tmp_path / "o.json").read_text())["results"]
    assert all(r["settings"]["hidden"] == [8] for r in rows)


def test_the_plug_in_knob_reaches_its_sequence_and_only_its_methods():
    """--lookahead names the plug-in sequence's knob where it applies (lucb-pp-plugin, or --cs query-plugin), as
    --mixture-weight names the mixture's; the sequences LUCB builds carry it."""
    from types import SimpleNamespace
    from bench.simulate import SIM_METHODS, lucb_knobs
    from dearicl.confidence import LUCB
    args = SimpleNamespace(upper_share=0.8, mixture_weight=0.9, lookahead=4.0, cs="query-bernstein")
    assert lucb_knobs(SIM_METHODS["lucb-pp-plugin"], args) == {"upper_share": 0.8, "lookahead": 4.0}
    assert lucb_knobs(SIM_METHODS["lucb-pp-wider"], args) == {"upper_share": 0.8, "first_weight": 0.9}
    assert lucb_knobs(SIM_METHODS["lucb"], SimpleNamespace(**{**vars(args), "cs": "query-plugin"})) == {"lookahead": 4.0}

    class Env:
        n_arms = 12
    lucb = LUCB(Env(), m=3, cs="query-plugin", split="lucb++", upper_share=0.8, lookahead=4.0)
    assert lucb.sequence.lookahead == lucb.upper_sequence.lookahead == 4.0
    assert LUCB(Env(), m=3, cs="query-plugin").sequence.lookahead == 2.0
