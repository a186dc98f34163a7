"""Multi-process runs (`accelerate launch -m bench`, `torchrun -m bench`): rank, world size, barrier."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    barrier: Callable[[], None] = lambda: None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init() -> Dist:
    """One process unless a launcher set WORLD_SIZE > 1; then accelerate's PartialState (gloo on CPU)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Dist()
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    return Dist(rank=state.process_index, world=state.num_processes, barrier=state.wait_for_everyone)
