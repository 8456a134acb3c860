"""Limits that keep slow or numerous clients from tying up the webhook's threads and memory.

- :class:`DeadlineReader`: the raw reader under a connection's ``rfile``. Between requests
  a connection may sit idle ``idle_timeout`` seconds; once the first byte of a request
  arrives, the whole request (request line, headers and body) must arrive within
  ``request_timeout`` seconds, however slowly it trickles (each ``recv`` waits only for
  the time left). Without this a client sending one byte per second keeps a thread forever.
- :class:`Slots`: a counting limit (non-blocking) for concurrent connections and for the
  bytes of request bodies held in memory at once; the server answers 503 when full.

The numbers are the server's flags (``k8sddp webhook serve --help``, ``docs/admission.md``).
"""

from __future__ import annotations

import io
import socket
import threading
import time

__all__ = ["DeadlineReader", "Slots"]


class DeadlineReader(io.RawIOBase):
    """A raw, readable stream over ``sock`` with an idle limit and a per-request deadline.

    Args:
        sock: the connected (TLS) socket, blocking with a timeout.
        idle_timeout: seconds to wait for the first byte of a request (keep-alive idle).
        request_timeout: seconds from the first byte of a request until it is read whole.

    Reads raise ``TimeoutError`` when a limit is passed (the HTTP handler closes the
    connection). :meth:`next_request` re-arms the idle state before each request.
    """

    def __init__(self, sock: socket.socket, *, idle_timeout: float, request_timeout: float) -> None:
        super().__init__()
        self._sock = sock
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        """Wait for the next request with the idle limit; its deadline starts at its first byte."""
        self.deadline = None

    def done_reading(self) -> None:
        """The request is read; later reads (a pipelined request) wait with the idle limit."""
        self.deadline = None

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        """Receive into ``buffer``; the byte count (0 at end of stream).

        Raises:
            TimeoutError: idle past ``idle_timeout``, or the request's deadline passed.
        """
        if self.deadline is None:
            self._sock.settimeout(self.idle_timeout)
            n = self._sock.recv_into(buffer)
            if n:
                self.deadline = time.monotonic() + self.request_timeout
            return n
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"request not received within {self.request_timeout:g} s")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError:
            raise TimeoutError(f"request not received within {self.request_timeout:g} s") from None


class Slots:
    """A non-blocking counter with a ceiling (connections, or bytes held in memory).

    Args:
        limit: the most units held at once (> 0).
    """

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def acquire(self, n: int = 1) -> bool:
        """Take ``n`` units if they fit under the ceiling; ``False`` (and take none) if not.

        A single request larger than the whole ceiling is let through when nothing else is
        held, so a lone large request is never refused for size alone.
        """
        with self._lock:
            if self.used + n > self.limit and self.used > 0:
                return False
            self.used += n
            return True

    def release(self, n: int = 1) -> None:
        """Give back ``n`` units taken by :meth:`acquire`."""
        with self._lock:
            self.used = max(0, self.used - n)
