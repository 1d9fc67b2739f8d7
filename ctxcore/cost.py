"""What a call cost: the price table and the cost of a normalized usage (docs/design.md,
"Cost and prices").

The table ships as data (``ctxcore/data/prices.json``): per model its prices in USD per
million tokens for input, output, cache reads and cache writes (5-minute and 1-hour apart),
the provider's page they were read from and the date. A file named by ``CTXSCOPE_PRICES``,
then one given with ``--prices``, replaces rows model by model (a row of the later file wins
for every name it matches). A model no row names has an unknown cost, never 0.

``cost(model, usage)`` reads a ``TokenUsage`` (``ctxcore.models``): the uncached input is
``input_tokens`` less the cache reads and writes; reasoning is billed as output (it is part
of ``output_tokens``); a cache count the source does not give is costed as none. The cost
is ``None`` when the model has no row, ``input_tokens`` or ``output_tokens`` is unknown, a
count is priced by no column of the row, the cache write's 5-minute/1-hour split is unknown
and the two prices differ, or the prompt is longer than the row's ``standard_up_to``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

from ctxcore.errors import PricesError
from ctxcore.models import TokenUsage
from ctxcore.settings import ENV_PRICES

#: the table shipped with ctxscope
SHIPPED = Path(__file__).resolve().parent / "data" / "prices.json"
PER = 1_000_000
_PRICES = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
_REQUIRED = ("model", "input", "output", "currency", "source", "checked")
_KNOWN = frozenset((*_REQUIRED, *_PRICES, "aliases", "prefixes", "standard_up_to", "note"))


@dataclass(frozen=True)
class Price:
    """One row of the table: USD per million tokens (``None``: the model has no such
    price), where it was read and when."""

    model: str
    input: float
    output: float
    cache_read: float | None
    cache_write_5m: float | None
    cache_write_1h: float | None
    source: str
    checked: date
    aliases: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    #: the longest prompt (input tokens) these prices hold for; longer is priced otherwise
    standard_up_to: int | None = None
    #: the file the row came from
    origin: str = ""


@dataclass(frozen=True)
class Cost:
    """A call's cost in USD and what it is made of. ``cache_write_5m_usd`` and
    ``cache_write_1h_usd`` are ``None`` when the split is unknown (both priced alike);
    ``reasoning_usd`` is the part of ``output_usd`` spent on reasoning, when known."""

    price: Price
    input_usd: float
    cache_read_usd: float
    cache_write_usd: float
    cache_write_5m_usd: float | None
    cache_write_1h_usd: float | None
    output_usd: float
    reasoning_usd: float | None

    @property
    def total_usd(self) -> float:
        return self.input_usd + self.cache_read_usd + self.cache_write_usd + self.output_usd


# --------------------------------------------------------------------------- the table


def _where(path: Path, index: int | None, field: str | None = None) -> str:
    row = "" if index is None else f": models[{index}]"
    return f"{path}{row}" + (f".{field}" if field else "")


def _number(path: Path, i: int, raw: dict[str, Any], field: str, required: bool) -> float | None:
    value = raw.get(field)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PricesError(
            f"{_where(path, i, field)}: expected a price in USD per million tokens, got {value!r}"
        )
    if value < 0:
        raise PricesError(f"{_where(path, i, field)}: a price cannot be negative ({value})")
    return float(value)


def _names(path: Path, i: int, raw: dict[str, Any], field: str) -> tuple[str, ...]:
    value = raw.get(field, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PricesError(f"{_where(path, i, field)}: expected a list of model names")
    return tuple(v.lower() for v in value)


def _text(path: Path, i: int, raw: dict[str, Any], field: str) -> str:
    value = raw.get(field)
    if not isinstance(value, str) or not value.strip():
        raise PricesError(f"{_where(path, i, field)}: expected a non-empty string")
    return value


def _checked(path: Path, i: int, raw: dict[str, Any]) -> date:
    text = _text(path, i, raw, "checked")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise PricesError(
            f"{_where(path, i, 'checked')}: expected the date the price was read, "
            f"YYYY-MM-DD, got {text!r}"
        ) from None


def _limit(path: Path, i: int, raw: dict[str, Any]) -> int | None:
    value = raw.get("standard_up_to")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PricesError(
            f"{_where(path, i, 'standard_up_to')}: expected a number of input tokens, got {value!r}"
        )
    return value


def _row(path: Path, i: int, raw: Any) -> Price:
    """One row, checked field by field (the first bad one is the error)."""
    if not isinstance(raw, dict):
        raise PricesError(f"{_where(path, i)}: expected an object, got {type(raw).__name__}")
    for field in _REQUIRED:
        if field not in raw:
            raise PricesError(f"{_where(path, i, field)}: missing")
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise PricesError(
            f"{_where(path, i, unknown[0])}: not a field of a price row "
            f"(fields: {', '.join(sorted(_KNOWN))})"
        )
    if raw["currency"] != "USD":
        raise PricesError(
            f"{_where(path, i, 'currency')}: only USD prices are read, got {raw['currency']!r}"
        )
    inp, out, read, five, hour = (
        _number(path, i, raw, f, required=f in ("input", "output")) for f in _PRICES
    )
    assert inp is not None and out is not None  # required above
    return Price(
        model=_text(path, i, raw, "model").lower(),
        input=inp,
        output=out,
        cache_read=read,
        cache_write_5m=five,
        cache_write_1h=hour,
        source=_text(path, i, raw, "source"),
        checked=_checked(path, i, raw),
        aliases=_names(path, i, raw, "aliases"),
        prefixes=_names(path, i, raw, "prefixes"),
        standard_up_to=_limit(path, i, raw),
        origin=str(path),
    )


def load_prices(path: Path) -> tuple[Price, ...]:
    """The rows of a price file (the shape of ``ctxcore/data/prices.json``); a bad file is
    one ``PricesError`` naming the file, the row and the field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PricesError(f"{path}: cannot read the price table ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PricesError(f"{path}: not a JSON price table ({exc})") from None
    rows = data.get("models") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise PricesError(f"{path}: expected an object with a 'models' list of price rows")
    return tuple(_row(path, i, raw) for i, raw in enumerate(rows))


class PriceTable:
    """The rows in effect: a model's row is the last one naming it (exactly, by an alias,
    or else by the longest prefix)."""

    def __init__(self, rows: tuple[Price, ...]) -> None:
        self.rows = rows
        self._exact: dict[str, Price] = {}
        self._prefixes: dict[str, Price] = {}
        for row in rows:
            for name in (row.model, *row.aliases):
                self._exact[name] = row
            for prefix in row.prefixes:
                self._prefixes[prefix] = row

    def overridden(self, rows: tuple[Price, ...]) -> PriceTable:
        """This table with ``rows`` replacing the rows of the models they name."""
        names = {n for r in rows for n in (r.model, *r.aliases)}
        kept = tuple(r for r in self.rows if not names & {r.model, *r.aliases})
        return PriceTable(kept + rows)

    def price(self, model: str | None) -> Price | None:
        """The row of ``model`` (a provider path such as ``openai/`` before it is ignored),
        or ``None``."""
        if not model:
            return None
        name = model.strip().lower().rsplit("/", 1)[-1]
        if name in self._exact:
            return self._exact[name]
        best = max((p for p in self._prefixes if name.startswith(p)), key=len, default=None)
        return self._prefixes[best] if best is not None else None


@cache
def _shipped() -> PriceTable:
    return PriceTable(load_prices(SHIPPED))


def price_table(prices: Path | None = None, env: str | None = None) -> PriceTable:
    """The table in effect: the shipped rows, replaced by those of the file ``env`` names
    (``CTXSCOPE_PRICES`` when not given), then by those of ``prices`` (``--prices``)."""

    table = _shipped()
    env_file = (os.environ.get(ENV_PRICES, "") if env is None else env).strip()
    if env_file:
        table = table.overridden(load_prices(Path(env_file)))
    if prices is not None:
        table = table.overridden(load_prices(prices))
    return table


# --------------------------------------------------------------------------- the cost


def _write_cost(price: Price, usage: TokenUsage) -> tuple[float, float | None, float | None] | None:
    """The cache write's cost, and its 5-minute and 1-hour parts (``None`` when the split
    is unknown); ``None`` when it cannot be priced."""
    write = usage.cache_write_tokens or 0
    if write == 0:
        return 0.0, None, None
    five, hour = usage.cache_write_5m_tokens, usage.cache_write_1h_tokens
    if five is not None and hour is not None and five + hour == write:
        if (five and price.cache_write_5m is None) or (hour and price.cache_write_1h is None):
            return None
        five_usd = five * (price.cache_write_5m or 0.0) / PER
        hour_usd = hour * (price.cache_write_1h or 0.0) / PER
        return five_usd + hour_usd, five_usd, hour_usd
    if price.cache_write_5m is None or price.cache_write_5m != price.cache_write_1h:
        return None  # the split decides the price and it is unknown
    return write * price.cache_write_5m / PER, None, None


def cost(
    model: str | None, usage: TokenUsage | None, table: PriceTable | None = None
) -> Cost | None:
    """What a call of ``model`` with ``usage`` cost by ``table`` (the one in effect when not
    given); ``None`` when it cannot be known (see the module docstring)."""
    price = (table or price_table()).price(model)
    if price is None or usage is None:
        return None
    if usage.input_tokens is None or usage.output_tokens is None:
        return None
    if price.standard_up_to is not None and usage.input_tokens > price.standard_up_to:
        return None
    read = usage.cache_read_tokens or 0
    if read and price.cache_read is None:
        return None
    write = _write_cost(price, usage)
    if write is None:
        return None
    uncached = usage.input_tokens - read - (usage.cache_write_tokens or 0)
    if uncached < 0:
        return None  # the counts contradict each other
    reasoning = usage.reasoning_tokens
    return Cost(
        price=price,
        input_usd=uncached * price.input / PER,
        cache_read_usd=read * (price.cache_read or 0.0) / PER,
        cache_write_usd=write[0],
        cache_write_5m_usd=write[1],
        cache_write_1h_usd=write[2],
        output_usd=usage.output_tokens * price.output / PER,
        reasoning_usd=None if reasoning is None else reasoning * price.output / PER,
    )


__all__ = ["SHIPPED", "Cost", "Price", "PriceTable", "cost", "load_prices", "price_table"]
