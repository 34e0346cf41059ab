"""The exit statuses of the ``tokenbudget`` command."""
OK = 0
FAILED = 1
BAD_INPUT = 2
INTERRUPTED = 130
