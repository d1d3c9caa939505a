"""``python -m interop.tools.conformance PATH...``: the command ``xla-conformance``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
