"""Secrets kept out of records and output: environment variables whose names look secret."""

from __future__ import annotations

from collections.abc import Mapping

#: a variable whose name contains one of these (any case) holds a secret
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_secret_name(name: object) -> bool:
    upper = str(name).upper()
    return any(word in upper for word in SECRET_WORDS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-looking values replaced by ``"***"``: wherever env is stored or printed."""
    return {k: ("***" if is_secret_name(k) else v) for k, v in env.items()}
