import os
import sys

# Nothing is fetched from a hub at run time unless the user asks for it.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.cli import main  # noqa: E402

sys.exit(main())
