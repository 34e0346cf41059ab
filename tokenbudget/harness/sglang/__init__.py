"""SGLang's real scheduler code (0.5.23) as a target: its runtime, engine driver and conformance."""
