"""Proofs over the model's own code (z3, CrossHair) and the verdict manifest."""
