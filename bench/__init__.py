"""ICL demonstration-selection benchmark harness: tasks, LLM layer, runner, CLI, and `bench.evaluate`."""


def __getattr__(name: str):
    if name == "evaluate":  # imported on first use: `import bench` stays light
        from bench.api import evaluate

        return evaluate
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
