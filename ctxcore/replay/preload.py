"""What the replay workers' fork server (``ctxcore.replay.pool``) imports before it forks them.

Importing this loads the default tokenizer's counting tables (cl100k_base in tiktoken and in
the verified fast backend: ~80 MB, read and checked in about a second of CPU). Loaded once in
the server, every worker forked from it starts with them, sharing their pages, instead of
loading its own (docs/design.md, "Diagnostics"). Nothing else imports this module.
"""

from __future__ import annotations

from ctxcore.tokens import get_backend

get_backend("cl100k_base")
