"""ICL demonstration-selection benchmark harness: tasks, LLM layer, runner, CLI."""
