import re
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import bench.runner as runner_mod
import methods.base as base
from bench.errors import ConfigError
from bench.tasks import make_task
from methods import Selector, create, register
from test_runner import make_config, lines
from fakes import FakeBackend

ROOT = Path(__file__).resolve().parent.parent


def doc_example(name: str, doc: str) -> str:
    text = (ROOT / doc).read_text()
    match = re.search(rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"{doc} lost its {name} example"
    return match.group(1)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    before = set(base.SELECTORS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in set(base.SELECTORS) - before:  # a plugin's selectors must not leak into later tests' `all`
        base.SELECTORS.pop(name)
    for mod in [m for m in sys.modules if m.startswith("plug_") or m == "my_selectors"]:
        sys.modules.pop(mod)


def test_builtin_registry_and_levels():
    known = base.available()
    assert {"zero-shot": "task", "few-shot": "task", "knn": "instance", "mmr": "instance"}.items() <= \
        {n: c.level for n, c in known.items()}.items()


def test_create_checks_names_and_parameters():
    assert create("mmr", {"lam": 0.8}).lam == 0.8
    with pytest.raises(ConfigError, match="unknown method 'knn2'; did you mean 'knn'\\? \\(known methods:"):
        create("knn2")
    with pytest.raises(ConfigError, match="method 'knn' has no parameter depth; parameters: k"):
        create("knn", {"depth": 2})
    with pytest.raises(ConfigError, match="lam must be in"):
        create("mmr", {"lam": 2})


def test_register_rejects_non_selectors_and_name_clashes():
    with pytest.raises(TypeError):
        register("bad")(object)
    with pytest.raises(ConfigError, match="already registered"):
        @register("knn")
        class Other(Selector):
            def fit(self, ctx):
                return self

            def select(self, q):
                return []


def test_plugin_module_and_missing_plugin(plugin_dir):
    (plugin_dir / "plug_a.py").write_text(
        "from methods import Selector, register\n"
        "@register('plug-first')\n"
        "class First(Selector):\n"
        "    def fit(self, ctx):\n        self.d_ = ctx.pool[: self.k]\n        return self\n"
        "    def select(self, q):\n        return self.d_\n")
    base.load_plugin("plug_a")
    assert "plug-first" in base.available()
    with pytest.raises(ConfigError, match="plugin module 'plug_nope' could not be imported"):
        base.load_plugin("plug_nope")


def test_entry_point_group(plugin_dir, monkeypatch):
    (plugin_dir / "plug_ep.py").write_text(
        "from methods import Selector\n"
        "class FromEntryPoint(Selector):\n"
        "    level = 'instance'\n"
        "    def fit(self, ctx):\n        return self\n"
        "    def select(self, q):\n        return []\n")
    eps = [EntryPoint(name="ep-selector", value="plug_ep:FromEntryPoint", group=base.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(base, "entry_points", lambda group: eps if group == base.ENTRY_POINT_GROUP else [])
    known = base.available()
    assert known["ep-selector"].level == "instance" and known["ep-selector"].name == "ep-selector"


def test_the_readme_ten_line_selector_runs_as_a_plugin_and_gives_the_k_shortest_questions(plugin_dir, data_dir,
                                                                                           monkeypatch):
    (plugin_dir / "my_selectors.py").write_text(doc_example("my_selectors.py", "README.md"))
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: FakeBackend())
    cfg = make_config(plugin_dir, data_dir, methods=["shortest", "few-shot"], tasks=["gsm8k"],
                      plugins=["my_selectors"])
    results = runner_mod.Runner(cfg).run()
    run = next(r for r in results["runs"] if r["method"] == "shortest")
    assert run["n"] == cfg.n_test and run["llm_calls"]["selection"] == 0 and not run["error"]
    records = [r for r in lines(plugin_dir / "run" / "records.jsonl") if r["method"] == "shortest"]
    pool = make_task("gsm8k").load_splits(data_dir, n_test=cfg.n_test, n_val=cfg.n_val, pool_size=cfg.pool_size,
                                          seed=cfg.seed).pool
    shortest = sorted(pool, key=lambda item: (len(item.question), item.id))[: cfg.k]
    assert all(r["demo_ids"] == [item.id for item in shortest] for r in records)


def test_the_docs_budget_selector_example_runs_with_oracle_and_budget(plugin_dir, data_dir, monkeypatch):
    (plugin_dir / "my_selectors.py").write_text(doc_example("best_of_random.py", "docs/adding-a-selector.md"))
    backend = FakeBackend()
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    cfg = make_config(plugin_dir, data_dir, methods=["best-of-random", "few-shot"], tasks=["gsm8k"],
                      plugins=["my_selectors"], method_params={"best-of-random": {"tries": 4}})
    results = runner_mod.Runner(cfg).run()
    run = next(r for r in results["runs"] if r["method"] == "best-of-random")
    assert run["llm_calls"]["selection"] == 4 * cfg.n_val and not run["budget_exhausted"]
    assert run["n"] == cfg.n_test
    # With a budget of 10 calls only two 4-item pulls fit; the selector stops and still answers.
    cfg2 = make_config(plugin_dir / "b", data_dir, methods=["best-of-random"], tasks=["gsm8k"],
                       plugins=["my_selectors"], llm_budget=10)
    results2 = runner_mod.Runner(cfg2).run()
    run2 = results2["runs"][0]
    assert run2["budget_exhausted"] and run2["llm_calls"]["selection"] == 8 and run2["n"] == cfg2.n_test
    report = (plugin_dir / "b" / "run" / "report.md").read_text()
    assert "stopped at --llm-budget 10 after 8 selection calls" in report
    sel_calls = [c for c in lines(plugin_dir / "b" / "run" / "calls.jsonl") if c["phase"] == "selection"]
    assert len(sel_calls) == 8 and all(c["method"] == "best-of-random" for c in sel_calls)
