"""Where a command's document goes: standard output, or ``--out FILE`` written atomically."""

from __future__ import annotations

import sys

from ..errors import UsageError

__all__ = ["write_output"]


def write_output(text: str, out: str | None) -> None:
    """Write ``text`` to standard output, or to ``out`` atomically (:func:`k8sddp.atomic.write_text_atomic`).

    Args:
        text: the whole document.
        out: the ``--out`` path, or ``None`` for standard output.

    Raises:
        UsageError: ``out`` cannot be written (exit 2, CONTRACT), naming ``--out`` and the reason.
    """
    if not out:
        sys.stdout.write(text)
        return
    from ..atomic import write_text_atomic

    try:
        write_text_atomic(out, text)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write: {exc.strerror or exc}") from exc
