"""Strict parsing of the critic's ``<value>x</value>`` answer.

The generative critic reasons in free text and ends with one line ``<value>x</value>``. The parser is strict
so that a malformed answer is *counted* as a parse failure instead of being silently read as some number:

* the **last** ``<value>...</value>`` pair in the text is the answer (tags are case-insensitive, whitespace
  around the number is allowed); earlier pairs are reasoning drafts and are ignored, even when the last one is
  malformed;
* the content must be one plain ASCII decimal number: ``[+-]digits[.digits][e[+-]digits]`` (``0.42``, ``.5``,
  ``1e-1``); ``0.5.5``, ``1/2``, ``50%``, ``0x1``, ``1_0`` and empty tags are malformed;
* the number must be finite: ``1e309`` overflows to infinity and ``nan`` / ``inf`` are rejected as non-finite;
* a finite value outside ``[0, R_max]`` is clipped into it (``-0.0`` reads as ``0.0``).

Nested tags (``<value><value>0.3</value></value>``) resolve to the innermost well-formed pair, because a
pair's content may not contain ``<``.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

__all__ = ["ValueParse", "ValueStatus", "classify_value", "parse_value", "validate_r_max"]

_TAG = re.compile(r"<value>([^<]*)</value>", re.IGNORECASE)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


class ValueStatus(enum.Enum):
    """How a critic answer was read."""

    OK = "ok"  #: a finite number inside [0, R_max]
    CLIPPED = "clipped"  #: a finite number outside [0, R_max], clipped into it
    MISSING = "missing"  #: no ``<value>...</value>`` pair at all
    MALFORMED = "malformed"  #: the last pair does not hold one plain decimal number
    NON_FINITE = "non_finite"  #: the last pair holds nan / inf or a number that overflows a float

    @property
    def parsed(self) -> bool:
        """True when the answer yields a usable value (``OK`` or ``CLIPPED``)."""
        return self in (ValueStatus.OK, ValueStatus.CLIPPED)


@dataclass(frozen=True)
class ValueParse:
    """The result of :func:`classify_value`.

    Attributes:
        status: how the answer was read.
        value: the value in ``[0, r_max]`` when ``status.parsed``, else None.
        raw: the stripped content of the last ``<value>`` pair, or None when there is none.
    """

    status: ValueStatus
    value: float | None
    raw: str | None


def validate_r_max(r_max: float) -> float:
    """Return ``float(r_max)`` or raise ValueError when it is not a finite number > 0."""
    r = float(r_max)
    if not math.isfinite(r) or r <= 0.0:
        raise ValueError(f"r_max must be a finite number > 0 (the largest possible return), got {r_max!r}")
    return r


def classify_value(text: str, r_max: float = 1.0) -> ValueParse:
    """Read the critic's answer from ``text`` and say how it was read (see the module docstring for rules).

    Args:
        text: the critic's completion text.
        r_max: the largest possible return R_max; values are clipped to ``[0, r_max]``.

    Returns:
        A :class:`ValueParse`. Never raises for any ``text``.
    """
    r = validate_r_max(r_max)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    last: re.Match[str] | None = None
    for match in _TAG.finditer(text):
        last = match
    if last is None:
        return ValueParse(ValueStatus.MISSING, None, None)
    raw = last.group(1).strip()
    if _NON_FINITE.fullmatch(raw):
        return ValueParse(ValueStatus.NON_FINITE, None, raw)
    if not _NUMBER.fullmatch(raw):
        return ValueParse(ValueStatus.MALFORMED, None, raw)
    number = float(raw)
    if not math.isfinite(number):
        return ValueParse(ValueStatus.NON_FINITE, None, raw)
    clipped = min(max(number, 0.0), r) + 0.0  # + 0.0 turns -0.0 into 0.0
    status = ValueStatus.OK if clipped == number else ValueStatus.CLIPPED
    return ValueParse(status, clipped, raw)


def parse_value(text: str, r_max: float = 1.0) -> float | None:
    """The critic's value in ``[0, r_max]``, or None when the answer is missing, malformed or non-finite.

    Strict: the last ``<value>x</value>`` pair (case-insensitive) decides; see :func:`classify_value`.

    >>> parse_value("draft <value>0.9</value> ... final <value> 0.25 </value>")
    0.25
    >>> parse_value("<VALUE>1.7</VALUE>") # clipped to r_max
    1.0
    >>> parse_value("<value>0.5.5</value>") is None
    True
    """
    return classify_value(text, r_max).value
