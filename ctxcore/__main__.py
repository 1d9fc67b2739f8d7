"""``python -m ctxcore`` is the ``ctxscope`` command."""

from ctxcore.cli import run

run()
