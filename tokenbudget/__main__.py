"""``python -m tokenbudget``: the same commands as the ``tokenbudget`` script."""
import sys

from .cli import main

sys.exit(main())
