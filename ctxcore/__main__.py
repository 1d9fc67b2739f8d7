"""``python -m ctxcore`` is the ``ctxscope`` command."""

import sys

from .cli import main

sys.exit(main())
