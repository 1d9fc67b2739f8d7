"""``python -m ctxcore`` is the ``ctxscope`` command."""

import sys

from ctxcore.cli import main

sys.exit(main())
