"""Secrets kept out of records and output: environment variables whose names look secret."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SECRET_WORDS", "is_secret_name", "redact_env"]

#: a variable whose name contains one of these (any case) holds a secret
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_secret_name(name: object) -> bool:
    """Whether an environment variable called ``name`` looks like it holds a secret."""
    upper = str(name).upper()
    return any(word in upper for word in SECRET_WORDS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` whose secret-looking values (the name contains TOKEN, KEY, SECRET, PASSWORD,
    PASSWD or CREDENTIAL, any case) are replaced with ``"***"``. Use it wherever env is stored or printed."""
    return {k: ("***" if is_secret_name(k) else v) for k, v in env.items()}
