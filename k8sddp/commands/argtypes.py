"""argparse types shared by the subcommands: a bad number is a usage error (exit 2) with a
message naming the value and the range, never a traceback later on."""

from __future__ import annotations

import argparse
import math


def _number(text: str, *, minimum: float, inclusive: bool, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of {what}") from None
    if not math.isfinite(value) or value < minimum or (not inclusive and value == minimum):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number of {what} {bound}")
    return value


def seconds(text: str) -> float:
    """Seconds > 0 (finite)."""
    return _number(text, minimum=0, inclusive=False, what="seconds")


def seconds_or_zero(text: str) -> float:
    """Seconds >= 0 (finite)."""
    return _number(text, minimum=0, inclusive=True, what="seconds")


def positive_int(text: str) -> int:
    """A whole number > 0 (a count, or whole seconds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def port(text: str) -> int:
    """A TCP port 0-65535 (0: the system picks one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return value
