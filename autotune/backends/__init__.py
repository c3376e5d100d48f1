"""Server backends: the ``Backend`` ABC (``base``), one module per server, and the backend of a server name.

``autotune.servers`` holds the table of servers and their facts (what the space file may say); this package gives the
backend that implements one (``backend_class``, ``get_backend``) and runs the checks a backend applies to a space's
checkpoints (``check_space``) and to this machine (``check_launcher``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from autotune.backends.base import Backend
from autotune.servers import server_class

if TYPE_CHECKING:
    from autotune.checks import Problem
    from autotune.space import Space


def backend_class(name: str) -> type[Backend]:
    """The backend class of server ``name`` (KeyError for an unknown name)."""
    return cast("type[Backend]", server_class(name))


def get_backend(name: str) -> Backend:
    """A new instance of backend ``name`` with its defaults (KeyError for an unknown name)."""
    return backend_class(name)()


def check_space(space: Space, backend: Backend | None = None) -> list[Problem]:
    """Static checks of the space's drafters against its target, before any launch: the checks the space's
    backend (or ``backend``) applies (``Backend.check_drafters``)."""
    return (backend or get_backend(space.server.backend)).check_drafters(space)


def check_launcher(space: Space, backend: Backend | None = None) -> list[Problem]:
    """An error when this machine cannot start the space's server (``Backend.launcher_problem``: what is missing,
    where it was looked for, how to get it); [] when it can. Nothing is run."""
    from autotune.checks import Problem

    problem = (backend or get_backend(space.server.backend)).launcher_problem(space)
    return [Problem("error", problem, None, "server.launcher")] if problem else []
