"""Stateful fuzzing of a target (the model or a real engine)."""
