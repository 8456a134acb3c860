"""The numeric limits every part of k8sddp checks against: one source for each bound.

Imported by the runtime (``k8sddp/runtime/config.py``, stdlib only), by ``k8sddp.schemagen`` (the
JSON Schemas' ``minimum``/``maximum`` and the strict profile's duration patterns), by ``render``
(the DDPJob spec) and by ``validate`` (strict). This module imports nothing but the stdlib, so the
runtime can use it without pulling in validate or render.

Sources:
    - int32 / int64: the Go types of the fields as the API server decodes them (``format: int32``
      / ``format: int64`` in the Kubeflow PyTorchJob CRD v1.9.4 and in core/v1 PodSpec): a larger
      value is refused when the object is decoded.
    - :data:`MAX_DURATION_SECONDS`: the largest duration the k8sddp runtime takes for any
      ``K8SDDP_*`` seconds variable (``k8sddp launch`` refuses more at start-up; larger values are
      typos, and ``inf``/``1e12`` overflowed ``faulthandler.dump_traceback_later``, review of
      issue 3).
    - :data:`MAX_SEED`: the runtime seeds ``torch.Generator.manual_seed`` (uint64) with
      ``seed * 1_000_003 + epoch`` and numpy with ``seed % 2**32`` (``k8sddp/runtime/loop.py``);
      2**32 - 1 keeps every derived seed in range.
    - Quantities: ``resource.Quantity`` as ``k8s.io/apimachinery/pkg/api/resource`` parses it; pod
      validation refuses a negative request or limit (``ValidateResourceQuantityValue``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["INT32_MAX", "INT64_MAX", "MAX_DURATION_SECONDS", "MAX_SEED", "NONNEGATIVE_QUANTITY_PATTERN", "QUANTITY_PATTERN", "decimal_range_pattern", "is_nonnegative_quantity", "quantity_value"]

#: Largest value of a Kubernetes ``int32`` field (replicas, nprocPerNode, backoffLimit, ...).
INT32_MAX = 2**31 - 1
#: Largest value of a Kubernetes ``int64`` field (activeDeadlineSeconds, terminationGracePeriodSeconds).
INT64_MAX = 2**63 - 1
#: Upper bound (seconds, inclusive) of every ``K8SDDP_*`` duration the runtime reads: 7 days.
MAX_DURATION_SECONDS = 7 * 24 * 3600
#: Upper bound (inclusive) of ``K8SDDP_SEED`` / ``spec.seed``.
MAX_SEED = 2**32 - 1

#: ``resource.Quantity`` syntax (the pattern the CRD's quantity fields carry).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
#: The same, without a minus sign: what pod validation accepts for a request or limit.
NONNEGATIVE_QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_NONNEGATIVE = re.compile(NONNEGATIVE_QUANTITY_PATTERN)


def is_nonnegative_quantity(value: object) -> bool:
    """Is ``value`` (a str, int or float from YAML) a Kubernetes quantity that is >= 0?"""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    if isinstance(value, float):
        return value >= 0 and value == value and value != float("inf")
    return isinstance(value, str) and bool(_NONNEGATIVE.match(value))


_SUFFIXES = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY_PARTS = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)|[KMGTPE]i|[numkMGTPE])?$")


def quantity_value(value: object) -> Decimal | None:
    """The exact value of a Kubernetes quantity (``"500m"`` -> 0.5, ``"1Gi"`` -> 1073741824), or
    ``None`` when ``value`` is not one (or its exponent is beyond any real quantity). Suffixes as
    ``resource.Quantity`` reads them."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return Decimal(str(value))
        except InvalidOperation:
            return None
    if not isinstance(value, str):
        return None
    m = _QUANTITY_PARTS.match(value)
    if not m:
        return None
    number, suffix = Decimal(m.group(1)), m.group(2) or ""
    try:
        if suffix[:1] in ("e", "E") and suffix not in _SUFFIXES:
            return number * Decimal(10) ** Decimal(suffix[1:])
        return number * _SUFFIXES[suffix]
    except ArithmeticError:  # an exponent beyond Decimal's range ("1e9999999"): no value to compare
        return None


def _digit_class(a: int, b: int) -> str:
    return str(a) if a == b else f"[{a}-{b}]"


def _digits_range(lo: str, hi: str) -> list[str]:
    """Regex alternatives matching every decimal string of ``len(lo)`` digits in ``[lo, hi]``."""
    if not lo:
        return [""]
    n = len(lo) - 1
    tail = "[0-9]" * n
    if lo[1:] == "0" * n and hi[1:] == "9" * n:
        return [_digit_class(int(lo[0]), int(hi[0])) + tail]
    if lo[0] == hi[0]:
        return [lo[0] + rest for rest in _digits_range(lo[1:], hi[1:])]
    out = [lo[0] + rest for rest in _digits_range(lo[1:], "9" * n)]
    a, b = int(lo[0]) + 1, int(hi[0]) - 1
    if a <= b:
        out.append(_digit_class(a, b) + tail)
    out += [hi[0] + rest for rest in _digits_range("0" * n, hi[1:])]
    return out


def decimal_range_pattern(lo: int, hi: int) -> str:
    """An anchored regex matching exactly the canonical decimals of the integers ``lo..hi``.

    Used where a bound must hold on a *string* (an env value the runtime parses), which JSON Schema
    can only check by pattern. ``decimal_range_pattern(1, 604800)`` matches ``"1"`` and
    ``"604800"``, not ``"0"``, ``"01"`` or ``"604801"``.

    Raises:
        ValueError: ``lo < 0`` or ``lo > hi``.
    """
    if lo < 0 or lo > hi:
        raise ValueError(f"bad range {lo}..{hi}")
    alternatives: list[str] = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        low = max(lo, 10 ** (width - 1) if width > 1 else 0)
        high = min(hi, 10**width - 1)
        if low <= high:
            alternatives += _digits_range(str(low), str(high))
    return "^(" + "|".join(alternatives) + ")$"
