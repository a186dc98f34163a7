"""Errors that the CLI turns into one clear line on stderr and exit status 2."""


class BenchError(Exception):
    """Base of every user-facing error: bad input, missing data, unreachable LLM."""


class ConfigError(BenchError):
    """Unknown names, bad option values, impossible settings (k larger than the pool)."""


class DataError(BenchError):
    """A missing data folder or a malformed row; the message names file and line."""


class LLMError(BenchError):
    """An LLM backend failed after its retries (server error, timeout, load failure)."""


class BudgetExhausted(Exception):
    """Raised by the reward oracle when a pull would exceed the selection-call budget.

    Not a BenchError: selectors catch it, stop exploring and use what they have.
    """


class FitFailed(Exception):
    """A selector has nothing valid to offer for one (method, task), e.g. an LTR model with no data.

    Not a BenchError: the runner records the failure on that row (score null, `error`), runs the
    other methods, and the process exits non-zero (3) at the end.
    """


def unknown_name(what: str, name: str, known, plural: str | None = None) -> ConfigError:
    """A ConfigError for a name not among `known`: the closest matches (difflib), then every known name in order."""
    import difflib

    known = list(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ConfigError(f"unknown {what} {name!r}{hint} (known {plural or what + 's'}: {', '.join(known)})")
