"""Tables, significance tests and figures built from a run folder."""
