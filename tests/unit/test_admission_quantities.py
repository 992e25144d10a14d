"""Admission webhook: Kubernetes quantities parsed exactly, converted to millicores and bytes."""

from __future__ import annotations

from decimal import Decimal

import pytest
from tidal.api.quantities import (
    INT64_MAX,
    QuantityError,
    cpu_millicores,
    memory_bytes,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("1", Decimal(1)),
        ("1.5", Decimal("1.5")),
        ("2Gi", Decimal(2 * 1024**3)),
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(1024**2)),
        ("1Ti", Decimal(1024**4)),
        ("1Pi", Decimal(1024**5)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1e+3", Decimal(1000)),
        ("15e-1", Decimal("1.5")),
        ("100M", Decimal(100_000_000)),
        ("1k", Decimal(1000)),
        ("1G", Decimal(10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),
        ("1Ei", Decimal(1024**6)),
        ("250u", Decimal("0.00025")),
        ("7n", Decimal("0.000000007")),
        (".5", Decimal("0.5")),
        ("1.", Decimal(1)),
        ("+2", Decimal(2)),
        ("0", Decimal(0)),
        ("-0", Decimal(0)),
        ("0.1Gi", Decimal("107374182.4")),
        (" 2 ", Decimal(2)),  # the API server trims, so does Tidal
        ("9223372036854775807", Decimal(INT64_MAX)),
        (2, Decimal(2)),  # JSON numbers, as the API server accepts them
        (0.25, Decimal("0.25")),
    ],
)
def test_valid_quantity_parses_to_its_exact_value(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_quantities_compare_by_value_not_spelling() -> None:
    assert (
        parse_quantity("1")
        == parse_quantity("1000m")
        == parse_quantity("1000000u")
        == parse_quantity("0.001k")
    )
    assert parse_quantity("1Gi") == parse_quantity("1073741824") == parse_quantity("1024Mi")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "",
            '"" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1.5.5",
            '"1.5.5" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "0x10",
            '"0x10" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1ki",
            '"1ki" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1K",
            '"1K" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1e",
            '"1e" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1e1.5",
            '"1e1.5" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1 Gi",
            '"1 Gi" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "NaN",
            '"NaN" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "Infinity",
            '"Infinity" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "١",
            '"١" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        (
            "1\n2",
            '"1\\n2" is not a quantity (expected a number with an optional suffix such as m, k, M, G, Ki, Mi, Gi or e3)',
        ),
        ("-1", '"-1" is negative'),
        ("-500m", '"-500m" is negative'),
        ("1e999", '"1e999" is too large'),
        ("9223372036854775808", '"9223372036854775808" is too large'),
        ("8Ei", '"8Ei" is too large'),
        ("1e99999", '"1e99999" is out of range (exponent beyond ±1000)'),
        ("1e-1001", '"1e-1001" is out of range (exponent beyond ±1000)'),
        ("1" * 65, f'"{"1" * 64}…" is too long for a quantity (at most 64 characters)'),
        (None, "expected a quantity string, got null"),
        (True, "expected a quantity string, got a boolean"),
        ([1], "expected a quantity string, got an array"),
        ({"cpu": 1}, "expected a quantity string, got an object"),
        (float("nan"), "nan is not a finite number"),
        (float("inf"), "inf is not a finite number"),
        (-3, '"-3" is negative'),
        (10**30, "a number too large for a quantity"),
    ],
)
def test_malformed_quantity_is_rejected_with_a_clear_reason(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(value)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("text", "millicores"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        ("2", 2000),
        ("0", 0),
        ("1n", 1),  # rounded up, as Quantity.MilliValue() does
        ("1500001u", 1501),
        ("0.0001", 1),
        ("1e-999", 1),
        ("9223372036854775m", 9_223_372_036_854_775),
        ("1k", 1_000_000),
    ],
)
def test_cpu_converts_to_millicores_rounding_up(text: str, millicores: int) -> None:
    assert cpu_millicores(text) == millicores


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2Gi", 2 * 1024**3),
        ("1Ki", 1024),
        ("100M", 100_000_000),
        ("1.5", 2),  # rounded up, as Quantity.Value() does
        ("500m", 1),
        ("0", 0),
        ("1e3", 1000),
        ("7Ei", 7 * 1024**6),
    ],
)
def test_memory_converts_to_bytes_rounding_up(text: str, size: int) -> None:
    assert memory_bytes(text) == size


def test_cpu_beyond_int64_millicores_is_too_large() -> None:
    # 9.3e15 cores parse (below 2**63-1) but are 9.3e18 millicores, above it.
    with pytest.raises(QuantityError) as raised:
        cpu_millicores("9300000000000000")
    assert str(raised.value) == '"9300000000000000" is too large (more than 2**63-1 millicores)'
