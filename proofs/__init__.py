"""Proofs over the model code (z3, CrossHair)."""
