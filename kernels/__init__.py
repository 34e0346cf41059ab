"""A small torch runner that executes scheduler steps for real."""
