import os
import sys

# Nothing is fetched from a hub at run time unless the user asks for it.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Library load bars and warnings would bury the harness's own progress and its one-line errors.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# OpenMP threads that wait for work sleep instead of spinning: beside another busy process a spinning thread holds
# a core the other needs, and a run crawled 10-30x (bench/threads.py; OpenMP reads this only when torch loads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.cli import main  # noqa: E402

sys.exit(main())
