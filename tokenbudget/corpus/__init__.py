"""The counterexample corpus shipped with tokenbudget: trace files."""
