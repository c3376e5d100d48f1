"""Server backends: the ``Backend`` ABC (``base``), one module per server, and the backend of a server name
(``registry``; the table of servers and what a space may say of each is ``autotune.servers``)."""

from __future__ import annotations

from autotune.backends.base import Backend
from autotune.backends.registry import backend_class, check_space, get_backend

__all__ = ["Backend", "backend_class", "check_space", "get_backend"]
