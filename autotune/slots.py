"""GPU slots on one host: ``--gpus 0-3 --gpus 4-7`` runs one worker per slot, in parallel, each with its own
``CUDA_VISIBLE_DEVICES``, port range, log folder and server (pure: specs -> slots -> each slot's space).

Slot ``i`` serves on ``server.port + PORT_STRIDE * i`` (``port_busy: next`` stays inside its ``PORT_STRIDE``
ports), logs to ``studies/NAME/logs/slot-i/`` and sees only its GPUs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autotune.errors import UserError
from autotune.space import Space

#: ports between two slots' base ports
PORT_STRIDE = 10


@dataclass(frozen=True)
class Slot:
    index: int
    gpus: tuple[int, ...]
    spec: str  # as given, e.g. "0-3"

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(map(str, self.gpus))

    @property
    def name(self) -> str:
        return f"slot-{self.index}"


def parse_gpus(spec: str) -> tuple[int, ...]:
    """``0-3`` -> (0, 1, 2, 3); ``0,2`` -> (0, 2); ``4`` -> (4,); ``0-1,6`` -> (0, 1, 6)."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise UserError(f"--gpus {spec}: expected GPU indices like 0-3 or 0,1 but got {part!r}") from None
        if a < 0 or b < a:
            raise UserError(f"--gpus {spec}: {part!r} is not a range of GPU indices (low-high, low <= high)")
        out += range(a, b + 1)
    if len(set(out)) != len(out):
        raise UserError(f"--gpus {spec}: a GPU is named twice")
    return tuple(out)


def make_slots(specs: list[str]) -> list[Slot]:
    """One slot per ``--gpus``; two slots sharing a GPU are an error."""
    slots = [Slot(i, parse_gpus(s), s) for i, s in enumerate(specs)]
    owner: dict[int, int] = {}
    for sl in slots:
        for g in sl.gpus:
            if g in owner:
                raise UserError(
                    f"--gpus {sl.spec}: GPU {g} is already in slot {owner[g]} (--gpus {slots[owner[g]].spec})"
                )
            owner[g] = sl.index
    return slots


def gpus_needed(space: Space, flags: tuple[str, ...]) -> tuple[int, str]:
    """The GPUs one server of ``space`` needs (the product of its tensor / pipeline parallel sizes in
    ``server.extra_args``, ``flags`` from the backend) and where that comes from."""
    args = list(space.server.extra_args)
    need, where = 1, []
    for i, a in enumerate(args):
        name, eq, val = a.partition("=")
        if name not in flags:
            continue
        v = val if eq else (args[i + 1] if i + 1 < len(args) else "")
        try:
            n = int(v)
        except ValueError:
            continue
        need *= max(1, n)
        where.append(f"{name} {n}")
    return need, " x ".join(where) or "no parallel-size flag"


def check_fits(slots: list[Slot], space: Space, flags: tuple[str, ...], space_path: str) -> None:
    """A slot with fewer GPUs than one server needs is an error before anything starts."""
    need, where = gpus_needed(space, flags)
    for sl in slots:
        if len(sl.gpus) < need:
            raise UserError(
                f"--gpus {sl.spec}: slot {sl.index} has {len(sl.gpus)} GPU(s) but one server of {space_path} needs "
                f"{need} (server.extra_args: {where}); give each slot at least {need} GPUs"
            )


def slot_space(space: Space, slot: Slot) -> Space:
    """``space`` as slot ``slot`` runs it: its GPUs in ``CUDA_VISIBLE_DEVICES``, its port range."""
    server = space.server
    env = {**server.env, "CUDA_VISIBLE_DEVICES": slot.cuda_visible_devices}
    port = int(server.port) + PORT_STRIDE * slot.index
    return dataclasses.replace(space, server=dataclasses.replace(server, env=env, port=port))
