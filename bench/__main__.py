import os
import sys

# Nothing is fetched from a hub at run time unless the user asks for it.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Library load bars and warnings would bury the harness's own progress and its one-line errors.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench.cli import main  # noqa: E402

sys.exit(main())
