"""The environment being changed: resolving it, probing what its Python loads, judging it, the GPU."""
