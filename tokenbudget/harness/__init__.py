"""Harnesses that drive the real engines' schedulers as targets, and conformance with the model."""
