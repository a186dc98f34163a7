"""--config FILE.yaml: options and per-method params from a file, flags override, the resolved file round-trips."""
import json

import pytest
import yaml

import bench.runner as runner_mod
from bench.cli import main
from fakes import FakeBackend


@pytest.fixture
def fake(monkeypatch):
    backend = FakeBackend(batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    return backend


def write(path, data):
    path.write_text(yaml.safe_dump(data))
    return path


BASE = {"methods": ["few-shot", "mmr"], "tasks": "gsm8k", "n_test": 2, "n_val": 2, "pool_size": 20, "k": 2,
        "max_new_tokens": 8, "temperature": 0, "bertscore_model": "local", "no_progress": True,
        "params": {"mmr": {"lam": 0.4}, "*": {"n_arms": 7}}}


def test_config_file_sets_options_and_params_and_flags_override(tmp_path, data_dir, fake):
    cfg = write(tmp_path / "run.yaml", {**BASE, "data_dir": str(data_dir), "seed": 3})
    out = tmp_path / "out"
    assert main(["--config", str(cfg), "--seed", "5", "--param", "mmr.lam=0.9", "--out", str(out)]) == 0
    written = json.loads((out / "config.json").read_text())
    identity = written["identity"]
    assert identity["seed"] == 5 and identity["k"] == 2 and identity["n_test"] == 2  # the flag beat the file
    assert identity["method_params"] == {"mmr": {"lam": 0.9}, "*": {"n_arms": 7}}
    assert written["cells"]["mmr"]["params"] == {"k": 2, "lam": 0.9}  # mmr takes no n_arms: "*" leaves it out
    resolved = yaml.safe_load((out / "run_config.yaml").read_text())
    assert resolved["seed"] == 5 and resolved["methods"] == ["few-shot", "mmr"] and resolved["k"] == 2
    assert resolved["params"]["mmr"] == {"lam": 0.9}
    # the resolved file is itself a config: it reproduces the run's identity
    again = tmp_path / "again"
    assert main(["--config", str(out / "run_config.yaml"), "--out", str(again)]) == 0
    again_written = json.loads((again / "config.json").read_text())
    assert again_written["identity"] == identity and again_written["cells"] == written["cells"]


@pytest.mark.parametrize("content, message", [
    ({"n_tset": 3}, "unknown option 'n_tset'"),
    ({"n_test": -3}, "bad value for 'n_test': must be positive, got -3"),
    ({"data_source": "web"}, "'data_source' must be one of local, hub"),
    ({"no_progress": "yes"}, "'no_progress' takes true or false"),
    ({"params": {"mmr": 0.4}}, "'params' must map a method name"),
    ({"params": {"mmr": {"alpha": 1}}, "methods": "mmr"}, "method 'mmr' has no parameter alpha"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, data_dir, content, message, capsys):
    cfg = write(tmp_path / "bad.yaml", {"data_dir": str(data_dir), **content})
    assert main(["--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_the_shipped_configs_parse_and_validate(tmp_path, data_dir):
    from bench.cli import config_options

    for name in ("paper", "smoke"):
        options = config_options(runner_mod.Path(__file__).parent.parent / "configs" / f"{name}.yaml")
        assert options.methods == ["all"] and options.params["*"]
    paper = yaml.safe_load((runner_mod.Path(__file__).parent.parent / "configs" / "paper.yaml").read_text())
    assert paper["params"]["*"]["m"] == 10 and paper["params"]["*"]["epsilon"] == 0.1
    assert paper["params"]["*"]["lr"] == 1e-4 and paper["temperature"] == 0.25 and paper["max_new_tokens"] == 1000
