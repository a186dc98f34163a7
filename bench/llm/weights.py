"""Whether an hf model's weights are at hand before anything loads, and what loading it on this machine means.

A model that is neither a local folder nor in the Hugging Face cache, with the hub unreachable (offline, or
HF_HUB_OFFLINE), fails here in one line that lists the ways out, instead of minutes of hub retries and then
"could not load model".
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

from bench.errors import ConfigError
from bench.log import LOG

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
HUB = ("huggingface.co", 443)


def cached_snapshot(model: str) -> Path | None:
    """The local folder of `model`: itself when it is a folder, else its snapshot in the hub cache holding a config
    and weights (None when either is missing)."""
    if Path(model).is_dir():
        return Path(model)
    if looks_like_path(model):
        return None
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(model, "config.json")
    if not isinstance(config, str):
        return None
    folder = Path(config).parent
    return folder if any((folder / name).exists() for name in WEIGHT_FILES) else None


def looks_like_path(model: str) -> bool:
    """A folder path rather than a hub id ('org/name')."""
    return Path(model).expanduser().is_absolute() or model.startswith((".", "~")) or model.count("/") > 1


def hub_reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """(reachable, why not): HF_HUB_OFFLINE says no at once; else one TCP connection with a short timeout."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False, "HF_HUB_OFFLINE is set"
    try:
        with socket.create_connection(HUB, timeout=timeout):
            return True, ""
    except OSError as exc:
        return False, f"huggingface.co cannot be reached ({exc.__class__.__name__})"


def check_weights(name: str, model: str) -> None:
    """A one-line ConfigError, with the ways out, when `model` (an hf backend's hub id or folder) is not at hand and
    cannot be fetched."""
    if cached_snapshot(model) is not None:
        return
    if looks_like_path(model):
        raise ConfigError(f"LLM '{name}': no model folder at {model}")
    reachable, why = hub_reachable()
    if reachable:
        return  # fetched when it loads (a gated model needs a token that accepted its licence)
    raise ConfigError(
        f"LLM '{name}' ({model}) is not in the Hugging Face cache and {why}. Ways out: run once online with a token "
        f"that accepted its licence (`huggingface-cli login`; https://huggingface.co/{model}); serve it elsewhere and "
        f"pass --backend openai --api-base URL (vLLM) or --backend ollama; pass a downloaded folder as --llm DIR "
        f"--backend hf; or run offline with --llm smollm2-135m (the Llama architecture with a chat template) or "
        f"gemma3-270m")


def parameter_count(folder: Path) -> int | None:
    """Parameters of the weights in `folder`, from their safetensors headers (no tensor is read)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    total = 0
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                shape = handle.get_slice(key).get_shape()
                count = 1
                for size in shape:
                    count *= size
                total += count
    return total


def warn_large_on_cpu(name: str, folder: Path | None, on_cpu: bool, limit: float = 1e9) -> None:
    """A warning before a model of more than `limit` parameters loads on a CPU: float32 memory, and no measured speed."""
    count = parameter_count(folder) if on_cpu and folder is not None else None
    if count is None or count <= limit:
        return
    LOG.warning("loading %s (%.1fB parameters) on a CPU with no GPU here: float32, about %.0f GB of memory, and no "
                "measured speed for it on this machine (`--dry-run` cannot project its time; `python -m bench perf "
                "--llm %s` measures it); a GPU or a served model (--backend openai|ollama) is the usual way",
                name, count / 1e9, count * 4 / 1e9, name)
