"""The exit status of every command."""
OK = 0  # the verdict is ok
FAILED = 1  # a verdict failed: a violation, an unmet expectation, an unexplained divergence, a failed check
BAD_INPUT = 2  # the input could not be used: bad usage, an unreadable trace, a refused config, vLLM missing
NO_EVIDENCE = 4  # nothing failed, but too little ran to say ok (a fuzz below its floor); 3 is a fuzz worker's orphan exit
INTERRUPTED = 130  # Ctrl-C: what was finished is reported
