"""The errors ctxscope raises on purpose.

Every error a user can cause (bad input, a missing encoding, a locked store) is a
``CtxscopeError`` whose message says what is wrong, where, and what to do next. The
CLI and the app catch only this base class and show its message in one line; any
other exception is a bug and should crash loudly.

    CtxscopeError
    ├── InputError            bad trace / captured input / config (names file, line, packet, field)
    ├── TokenizerError        an encoding cannot be loaded, or an unknown tokenizer name
    ├── BudgetError           must-keep items alone overflow the budget (names them)
    ├── StoreError            the DuckDB store cannot be opened or written
    │   └── StoreLockedError  another process holds the store
    ├── ImportFormatError     a file given to an importer is not in the expected format
    └── PricesError           a price table is malformed (names file, row, field)
"""

from __future__ import annotations


class CtxscopeError(Exception):
    """Base class of every error ctxscope raises deliberately."""


class InputError(CtxscopeError, ValueError):
    """A trace, captured input or config is malformed; the message says where."""


class TokenizerError(CtxscopeError):
    """A tokenizer is unknown or its encoding file cannot be loaded."""


class BudgetError(CtxscopeError):
    """The must-keep items alone do not fit the budget."""

    def __init__(self, message: str, packet_ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.packet_ids = list(packet_ids or [])


class StoreError(CtxscopeError):
    """The trace store cannot be opened, migrated or written."""


class StoreLockedError(StoreError):
    """Another process owns the DuckDB file."""


class ImportFormatError(CtxscopeError, ValueError):
    """A file handed to an importer is not in the format it expects."""


class PricesError(CtxscopeError, ValueError):
    """A price table (``ctxcore/data/prices.json``, ``--prices``, ``CTXSCOPE_PRICES``) is
    malformed; the message names the file, the row and the field."""
