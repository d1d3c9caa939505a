"""``python -m interop.tools.conformance PATH...``: the command ``xla-conformance``."""

import sys

from .cli import main

sys.exit(main())
