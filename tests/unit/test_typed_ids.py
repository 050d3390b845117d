"""An id a user types (sample, client, slice, request) is the digits 0-9 only, below 2⁶³: what Python's
``int()`` also reads (``1_8``, ``+18``, `` 18``, ``١٨``) is refused, never taken as 18."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedforget.core.ids import MAX_ID, parse_id
from fedforget.core.slicing import UnitId

#: digit blocks of other scripts that int() reads as 0-9
OTHER_DIGITS = ["\u0660", "\u06f0", "\u0966", "\uff10", "\u09e6", "\U0001d7ce"]


def lookalikes(n: int) -> list[str]:
    text = str(n)
    out = [f"+{text}", f" {text}", f"{text} ", f"{text}\n", f"-{text}" if n == 0 else f"{text[0]}_{text[1:]}"
           if len(text) > 1 else f"0_{text}"]
    out += ["".join(chr(ord(zero) + int(d)) for d in text) for zero in OTHER_DIGITS]
    return out


@given(st.integers(0, MAX_ID))
def test_what_int_reads_but_is_not_ascii_digits_is_refused(n):
    for text in lookalikes(n):
        assert int(text) == n  # control: Python would have taken it as n
        with pytest.raises(ValueError, match="digits 0-9"):
            parse_id(text, "sample id")
    assert parse_id(str(n), "sample id") == n


@pytest.mark.parametrize("text", [str(2**63), "9" * 30, "1" + "0" * 5000])
def test_an_id_at_or_past_2_63_is_out_of_range_in_one_short_line(text):
    with pytest.raises(ValueError, match=r"out of range.*0\.\.9223372036854775807") as exc:
        parse_id(text, "client id")
    assert len(str(exc.value)) < 200


def test_leading_zeros_and_a_minimum():
    assert parse_id("00018", "sample id") == 18 and parse_id("0", "sample id") == 0
    with pytest.raises(ValueError, match="out of range"):
        parse_id("0", "request id", minimum=1)


@pytest.mark.parametrize("text", ["1_0:0", "١:٠", "+1:0", "1:0:0", "1", "1: 0"])
def test_a_slice_id_takes_the_same_digits(text):
    with pytest.raises(ValueError, match="not a slice id"):
        UnitId.parse(text)
    assert UnitId.parse("10:0") == UnitId(10, 0)
