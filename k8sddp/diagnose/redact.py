"""Redacting secrets and tokens from log excerpts before they go into an incident record (stdlib).

Recognised: ``NAME=value`` / ``NAME: value`` where NAME says token, secret, password, passwd,
api key, access key, credential or auth; ``Authorization: Bearer/Basic ...``; user:password in
URLs; and the fixed formats of common tokens (GitHub ``ghp_``/``gho_``/``ghs_``/``github_pat_``,
Hugging Face ``hf_``, AWS access key ids ``AKIA``/``ASIA``, Slack ``xox?-``, OpenAI-style
``sk-``, Weights & Biases keys in ``WANDB_API_KEY``, JWTs ``eyJ...``). Sources: GitHub docs
"About authentication: token formats"; AWS IAM docs "Understanding unique ID prefixes";
RFC 7235 (Authorization header); RFC 3986 3.2.1 (userinfo).
"""

from __future__ import annotations

import re

MASK = "[REDACTED]"
_NAMED = re.compile(
    r"(?i)\b([A-Z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIALS?|AUTH)[A-Z0-9_.-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)")
_AUTH = re.compile(r"(?i)\b(authorization\s*:\s*(?:bearer|basic|token)\s+)\S+")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@")
_FORMATS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}|"
    r"(?:AKIA|ASIA)[A-Z0-9]{16}|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|"
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b")


def redact(text: str) -> str:
    """``text`` with every recognised secret replaced by ``[REDACTED]``."""
    text = _AUTH.sub(lambda m: m.group(1) + MASK, text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _NAMED.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    return _FORMATS.sub(MASK, text)
