"""The names of what executes a trace's ops besides the real engines (``harness.registry``):
the reference model, and the model with the torch runner executing its steps."""
MODEL, RUNNER = "model", "runner"
