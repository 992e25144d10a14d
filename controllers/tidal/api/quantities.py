# SPDX-License-Identifier: Apache-2.0
"""Kubernetes resource quantities ("500m", "1.5", "2Gi", "1e3"), parsed exactly.

The grammar is the one of ``k8s.io/apimachinery/pkg/api/resource``::

    quantity        ::= signedNumber suffix
    suffix          ::= binarySI | decimalExponent | decimalSI
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= e signedInteger | E signedInteger
    number          ::= digits | digits "." | digits "." digits | "." digits

Values are `decimal.Decimal`, built without rounding, so "0.1" + "0.2" is 0.3 and "1" equals
"1000m". Conversions to the integer units Tidal works in (CPU millicores, memory bytes) round
up, as ``Quantity.MilliValue()`` and ``Quantity.Value()`` do: a container that asked for a
fraction of a unit must get at least that much.

Where Tidal is stricter than the API server, on purpose:

* negative quantities are rejected: a request or a limit cannot be negative;
* a value above 2**63-1 in the converted unit is rejected as too large (int64 is what every
  Kubernetes component stores), and so are a string longer than 64 characters and an exponent
  beyond ±1000 ("1e-99999" would be 1 nanocore to Kubernetes; here it is an error);
* only ASCII digits are digits (Python's ``\\d`` and ``str.isdigit`` accept other scripts').

Surrounding whitespace is stripped, as the API server's JSON decoding of a quantity does.
"""

from __future__ import annotations

import functools
import json
import math
import re
from decimal import Context, Decimal, Inexact

from tidal.api.shape import json_type

__all__ = [
    "INT64_MAX",
    "MAX_QUANTITY_LENGTH",
    "QuantityError",
    "parse_quantity",
    "cpu_millicores",
    "memory_bytes",
]

INT64_MAX = 2**63 - 1
#: Longer strings are rejected before any parsing; real quantities are a few characters.
MAX_QUANTITY_LENGTH = 64

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE]))?"
)
_DECIMAL_POWERS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_MULTIPLIERS = {f"{prefix}i": 1024 ** (index + 1) for index, prefix in enumerate("KMGTPE")}
# Enough digits for a 64-character number times 1024**6, so multiplying never rounds; Inexact is
# trapped so that a rounding would be a loud bug, not a silently wrong quantity.
_EXACT = Context(prec=128, traps=[Inexact])
_MAX_EXPONENT = 1000
_FORMAT_HINT = "a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3"


def _quote(text: str) -> str:
    # JSON quoting keeps control characters and odd input visible in a one-line message.
    if len(text) > MAX_QUANTITY_LENGTH:
        text = text[:MAX_QUANTITY_LENGTH] + "…"
    return json.dumps(text, ensure_ascii=False)


class QuantityError(ValueError):
    """A value is not a usable resource quantity; ``str(error)`` is the user-facing reason.

    Attributes:
        value: the value as found on the object.
    """

    def __init__(self, value: object, problem: str) -> None:
        self.value = value
        super().__init__(problem)


def _text_of(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    # The API server serialises quantities as strings, but a number is what a hand-written
    # review (or YAML's `cpu: 2`) holds, and the API server accepts it too.
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 64:  # also keeps str() below Python's digit limit for ints
            raise QuantityError(value, "a number too large for a quantity")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, f"{value!r} is not a finite number")
        return repr(value)
    raise QuantityError(value, f"expected a quantity string, got {json_type(value)}")


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal:
    # Cached: a cluster uses few distinct quantity strings, and Decimals are immutable.
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(
            text,
            f"{_quote(text)} is too long for a quantity (at most {MAX_QUANTITY_LENGTH} characters)",
        )
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(text, f"{_quote(text)} is not a quantity (expected {_FORMAT_HINT})")
    number = Decimal(match["number"])  # exact: the constructor never rounds
    if match["exponent"] is not None:
        power = int(match["exponent"][1:])
        if abs(power) > _MAX_EXPONENT:
            # Decimal itself cannot hold an exponent beyond ssize_t; no real quantity comes close.
            raise QuantityError(
                text, f"{_quote(text)} is out of range (exponent beyond ±{_MAX_EXPONENT})"
            )
        value = _shift(number, power)
    elif match["binary"] is not None:
        value = _EXACT.multiply(number, Decimal(_BINARY_MULTIPLIERS[match["binary"]]))
    elif match["decimal"] is not None:
        value = _shift(number, _DECIMAL_POWERS[match["decimal"]])
    else:
        value = number
    if value < 0:
        raise QuantityError(text, f"{_quote(text)} is negative")
    if value > INT64_MAX:
        raise QuantityError(text, f"{_quote(text)} is too large")
    return value if value else Decimal(0)  # "-0" and "0e5" are plain 0


def _shift(number: Decimal, power_of_ten: int) -> Decimal:
    # number * 10**power_of_ten by moving the exponent: exact, and cheap even for "1e-999999".
    sign, digits, exponent = number.as_tuple()
    return Decimal((sign, digits, exponent + power_of_ten))


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity, in its base unit (cores for CPU, bytes for memory).

    Accepts a quantity string, or an int or finite float (the API server accepts JSON numbers).

    Raises:
        QuantityError: malformed, negative, larger than 2**63-1, or not a string or number.
    """
    return _parse_text(_text_of(value))


def _ceil_scaled(value: Decimal, power_of_ten: int) -> int:
    """ceil(value * 10**power_of_ten), exactly, for 0 <= value <= INT64_MAX."""
    if not value:
        return 0
    _, digits, exponent = value.as_tuple()
    coefficient = int("".join(map(str, digits)))
    shift = exponent + power_of_ten
    if shift >= 0:
        return coefficient * 10**shift  # bounded: value <= INT64_MAX keeps shift small
    if -shift > len(digits):
        return 1  # 0 < value * 10**power_of_ten < 1, however tiny ("1e-999999")
    return -(-coefficient // 10**-shift)


@functools.lru_cache(maxsize=4096)
def _text_to_units(text: str, power_of_ten: int, unit: str) -> int:
    amount = _ceil_scaled(_parse_text(text), power_of_ten)
    if amount > INT64_MAX:
        raise QuantityError(text, f"{_quote(text)} is too large (more than 2**63-1 {unit})")
    return amount


def _to_units(value: object, power_of_ten: int, unit: str) -> int:
    return _text_to_units(_text_of(value), power_of_ten, unit)


def cpu_millicores(value: object) -> int:
    """A CPU quantity in millicores, rounded up ("1.5" -> 1500, "1n" -> 1).

    Raises:
        QuantityError: as `parse_quantity`, or more than 2**63-1 millicores.
    """
    return _to_units(value, 3, "millicores")


def memory_bytes(value: object) -> int:
    """A memory quantity in bytes, rounded up ("1Ki" -> 1024, "1.5" -> 2).

    Raises:
        QuantityError: as `parse_quantity`.
    """
    return _to_units(value, 0, "bytes")
