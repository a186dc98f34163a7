import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def shared_data() -> Path | None:
    env = os.environ.get("BENCH_DATA_DIR")
    candidate = Path(env) if env else ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


@pytest.fixture(autouse=True)
def _idle_machine(monkeypatch):
    """A run in a test sees idle cores: the shared-cores warning would depend on what else the machine runs
    (its own test sets the load it needs)."""
    import bench.threads

    monkeypatch.setattr(bench.threads, "load_average", lambda: 0.0)


@pytest.fixture(scope="session", autouse=True)
def _session_embedding_cache(tmp_path_factory):
    """Module- and session-scoped fixtures (built before any function's own cache) embed into the session's
    temporary cache, not the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BENCH_EMBEDDING_CACHE", str(tmp_path_factory.mktemp("session-embeddings") / "embeddings.sqlite"))
        yield


@pytest.fixture(autouse=True)
def _own_embedding_cache(monkeypatch, tmp_path_factory):
    """Each test starts with an empty embedding cache of its own (the user's ~/.cache is never touched), so what
    a test embeds does not depend on the tests before it."""
    monkeypatch.setenv("BENCH_EMBEDDING_CACHE", str(tmp_path_factory.mktemp("embeddings") / "embeddings.sqlite"))


@pytest.fixture(autouse=True)
def _reports_compile(request):
    """Every report.tex a test writes compiles with a real LaTeX (where pdflatex is installed: CI installs it)."""
    yield
    from latexcheck import latex_errors, pdflatex

    folder = request.node.funcargs.get("tmp_path")
    if folder is None or pdflatex() is None:
        return
    for tex in sorted(Path(folder).rglob("report.tex")):
        errors = latex_errors(tex)
        COMPILED.append(tex)
        assert errors is None, f"{tex} does not compile:\n{errors}"


COMPILED: list[Path] = []  # every report.tex the tests wrote and pdflatex compiled (the summary line counts them)


def pytest_terminal_summary(terminalreporter):
    from latexcheck import pdflatex

    terminalreporter.write_line(f"report.tex compiled with pdflatex: {len(COMPILED)}" if pdflatex() else
                                "report.tex not compiled: no pdflatex here (CI installs it)")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data()
    if path is None:
        pytest.skip("../shared/data (or BENCH_DATA_DIR) is not present")
    return path


@pytest.fixture
def fake(monkeypatch):
    """The runner's LLM replaced by a deterministic fake whose rewards differ between arms."""
    import bench.runner as runner_mod
    from fakes import FakeBackend, varied

    backend = FakeBackend(respond=varied, batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    return backend


@pytest.fixture(scope="session")
def encoder():
    from bench.encoder import Encoder

    return Encoder()


@pytest.fixture(scope="session")
def bertscore():
    from bench.metrics import BertScore, BertScoreConfig

    return BertScore(BertScoreConfig(model="local"))


def pytest_addoption(parser):
    parser.addoption("--exhaustive", action="store_true",
                     help="also run the `exhaustive` cases: every model, sampler and temperature of an equality check "
                          "whose default cases cover each code path once")


def pytest_collection_modifyitems(config, items):
    """Opt-in cases are deselected: benchmarks without --benchmark-enable, `exhaustive` cases without --exhaustive."""
    opt_in = [marker for marker, option in (("benchmark", "benchmark_enable"), ("exhaustive", "exhaustive"))
              if not config.getoption(option, False)]
    left_out = [item for item in items if any(item.get_closest_marker(marker) for marker in opt_in)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        dropped = set(map(id, left_out))
        items[:] = [item for item in items if id(item) not in dropped]


@pytest.fixture
def one_torch_thread():
    """One torch thread for a test: two on this shared 2-core machine are many times slower than one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
