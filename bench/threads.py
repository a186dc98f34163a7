"""CPU threads of a run (--threads): chosen once, applied before any model loads, recorded in results.json.

Measured (scripts/threads_benchmark.py, studies/perf/threads.md; 2 cores, a small run): torch's default, every core
with OpenMP's active wait, took 4.8x its time alone beside another busy torch program, because each thread spins for
a core the other holds; every core with a passive wait kept its speed alone (33.7 s against 34.4 s) and took 1.4x
beside it; one thread, 1.03x beside but 13% slower alone. `python -m bench` sets OMP_WAIT_POLICY=PASSIVE
before torch loads (a caller's own setting wins). The thread count itself stays fixed (every core unless
--threads says otherwise): a neural fit's float sums differ between thread counts, so a count that followed the
machine's load would make a run's selections depend on what else was running.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from bench.errors import ConfigError
from bench.log import LOG


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # torch's intra-op threads (the embedded/hf backends, the encoder, the selectors' training)
    cores: int  # cores this process may run on
    load_average: float  # the machine's 1-minute load when the run started: how busy the cores were
    how: str  # "given" (--threads N), "OMP_NUM_THREADS" (auto, the caller's environment) or "auto" (every core)
    wait_policy: str  # OpenMP's, as this process started with it

    @property
    def shared(self) -> bool:
        """Whether other processes kept the cores busy at the start (half a core's load or more)."""
        return self.load_average >= 0.5

    def as_dict(self) -> dict:
        return {**asdict(self), "shared": self.shared}


def parse_threads(value) -> str:
    """--threads: auto, or a positive count."""
    text = str(value).strip().lower()
    if text == "auto" or (text.isdigit() and int(text) > 0):
        return text
    raise ConfigError(f"--threads takes auto or a positive count, got {value!r}")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_average() -> float:
    """The machine's 1-minute load average (0 where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def choose(option: str = "auto") -> ThreadChoice:
    option = parse_threads(option)
    load = load_average()
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if option != "auto":
        n, how = int(option), "given"
    elif env.isdigit() and int(env) > 0:  # the caller pinned it (scripts/smoke.sh: one thread)
        n, how = int(env), "OMP_NUM_THREADS"
    else:
        n, how = cores(), "auto"
    policy = os.environ.get("OMP_WAIT_POLICY", "").upper() or "ACTIVE (OpenMP's default)"
    return ThreadChoice(n, cores(), round(load, 2), how, policy)


def apply(choice: ThreadChoice) -> None:
    """torch's thread count (loaded or not: an unloaded torch reads OMP_NUM_THREADS when it starts), and one warning
    when the cores were busy at the start."""
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(choice.threads)
    else:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(choice.threads)
    if choice.shared:
        passive = choice.wait_policy == "PASSIVE"
        LOG.warning("the cores are shared (load average %.2f on %d cores when the run started): it runs slower "
                    "than alone%s; --threads 1 leaves the other process a core", choice.load_average, choice.cores,
                    "" if passive else " and OpenMP's active wait makes it crawl: set OMP_WAIT_POLICY=PASSIVE")
