"""A server SSLContext that follows its certificate and key files as they are rotated.

cert-manager and kubelet update a mounted Secret by swapping a symlink (the ``..data``
directory), so the files change under a running process. :class:`ReloadingTLS` checks the
files' identity (inode, size, mtime of the resolved paths) at most once per
``check_interval`` seconds when a connection is accepted, and builds a fresh
``ssl.SSLContext`` when they change. Connections already open keep the context they were
accepted with; new ones get the new certificate. A half-written pair that fails to load is
logged and the previous context stays in use until a later check loads a good pair.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

from ..errors import UsageError

__all__ = ["ReloadingTLS", "explain"]

log = logging.getLogger("k8sddp.webhook")

_Signature = tuple[tuple[int, int, int], tuple[int, int, int]]


def explain(exc: BaseException) -> str:
    """A readable reason for a failed certificate/key load (OpenSSL's codes are cryptic).

    ``KEY_VALUES_MISMATCH`` (same key type) and ``NO_CERTIFICATE_ASSIGNED`` (different key
    types, e.g. an RSA key with an EC certificate) both mean the key is not the certificate's.
    """
    reason = getattr(exc, "reason", None)
    if reason in ("KEY_VALUES_MISMATCH", "NO_CERTIFICATE_ASSIGNED"):
        return f"the certificate and private key do not match ({exc})"
    if isinstance(exc, ssl.SSLError) and "PEM lib" in str(exc):
        return f"the certificate or key file is empty or not PEM ({exc})"
    return str(exc)


def _signature(cert: str, key: str) -> _Signature:
    out = []
    for path in (cert, key):
        st = os.stat(os.path.realpath(path))
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return out[0], out[1]


class ReloadingTLS:
    """Holds the current server ``SSLContext`` for a certificate/key file pair.

    Args:
        cert_file: PEM certificate chain (leaf first), e.g. ``/tls/tls.crt``.
        key_file: PEM private key, e.g. ``/tls/tls.key``.
        check_interval: seconds between file checks (>= 0; 0 checks on every connection).
        min_version: lowest TLS version accepted (default TLS 1.2, as the API server speaks).

    Raises:
        UsageError: the files cannot be read or do not form a valid pair at start-up.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        check_interval: float = 1.0,
        min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.check_interval = check_interval
        self.min_version = min_version
        self._lock = threading.Lock()
        self.reloads = 0
        try:
            self._sig = _signature(cert_file, key_file)
            self._ctx = self._build()
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot load TLS certificate {cert_file} / key {key_file}: {explain(exc)}") from exc
        self._checked = time.monotonic()

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        ctx.load_cert_chain(self.cert_file, self.key_file)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def context(self) -> ssl.SSLContext:
        """The context for a new connection, reloaded first if the files changed."""
        now = time.monotonic()
        if now - self._checked < self.check_interval:
            return self._ctx
        with self._lock:
            if now - self._checked < self.check_interval:
                return self._ctx
            self._checked = now
            try:
                sig = _signature(self.cert_file, self.key_file)
            except OSError as exc:
                log.error("tls files unreadable; keeping the current certificate", extra={"error": str(exc)})
                return self._ctx
            if sig != self._sig:
                try:
                    self._ctx = self._build()
                except (OSError, ssl.SSLError) as exc:
                    # Probably caught mid-rotation: keep serving the old pair and retry later.
                    log.error("tls reload failed; keeping the current certificate",
                              extra={"error": explain(exc), "cert_file": self.cert_file, "key_file": self.key_file})
                    return self._ctx
                self._sig = sig
                self.reloads += 1
                log.info("tls certificate reloaded", extra={"cert_file": self.cert_file, "reloads": self.reloads})
        return self._ctx

    @property
    def ready(self) -> bool:
        """Whether a certificate is loaded (always true after a successful construction)."""
        return self._ctx is not None
