"""Which shard of the data a process reads: its rank and the world size.

Where ``torch.distributed`` is initialised, its rank and world size are the
truth. Otherwise each launcher's environment is read, in this order:

- torchrun, ``accelerate launch``, DeepSpeed: ``RANK`` and ``WORLD_SIZE``;
- PyTorch Lightning's own launcher (``Trainer(strategy="ddp")`` started as
  ``python train.py``): ``WORLD_SIZE`` and ``LOCAL_RANK``, with ``NODE_RANK``
  (and ``LOCAL_WORLD_SIZE`` where it is set) on several nodes;
- SLURM (``srun``): ``SLURM_PROCID`` and ``SLURM_NTASKS``;
- Open MPI (``mpirun``): ``OMPI_COMM_WORLD_RANK`` and ``OMPI_COMM_WORLD_SIZE``;
  MPICH and Intel MPI: ``PMI_RANK`` and ``PMI_SIZE``.

A launcher's variables half set, contradicting each other, or a lone
``LOCAL_RANK`` (which says nothing of the other processes) is an error naming
them: guessing would have a process read another's shard, or all of it.
"""

from __future__ import annotations

import os
import sys

# (what the source is called, the rank variable, the world size variable)
_PAIRS = (
    ("torchrun's RANK and WORLD_SIZE", "RANK", "WORLD_SIZE"),
    ("SLURM's SLURM_PROCID and SLURM_NTASKS", "SLURM_PROCID", "SLURM_NTASKS"),
    ("Open MPI's OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE"),
    ("MPI's PMI_RANK and PMI_SIZE", "PMI_RANK", "PMI_SIZE"),
)

DEFAULT = "no launcher (one process)"
ARGUMENTS = "the arguments rank= and world_size="
TORCH_DISTRIBUTED = "torch.distributed"


def _int(name):
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _checked(rank, world, rank_name, world_name):
    if world < 1:
        raise ValueError(f"environment variable {world_name}={world} must be >= 1")
    if not 0 <= rank < world:
        raise ValueError(f"environment variable {rank_name}={rank} is outside 0..{world_name}-1 "
                         f"({world_name}={world})")
    return rank, world


def from_torch_distributed():
    """(rank, world_size) of an initialised default process group, else None."""
    torch = sys.modules.get("torch")  # never imported here: only if the program did
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return dist.get_rank(), dist.get_world_size()
    except (RuntimeError, ValueError):
        return None


def from_environment():
    """(rank, world_size, source) from a launcher's variables, or None when
    no launcher set any."""
    rank, world = _int("RANK"), _int("WORLD_SIZE")
    local = _int("LOCAL_RANK")
    if rank is not None or world is not None:
        if rank is None and local is not None:  # Lightning's launcher sets no RANK
            return _lightning(local, world)
        if rank is None or world is None:
            have, missing = ("WORLD_SIZE", "RANK") if rank is None else ("RANK", "WORLD_SIZE")
            raise ValueError(
                f"the environment sets {have}={os.environ[have]!r} but not {missing}: every "
                f"process would read the same shard. Set both (torchrun does), or pass rank= and "
                "world_size=")
        return (*_checked(rank, world, "RANK", "WORLD_SIZE"), _PAIRS[0][0])
    for source, rank_name, world_name in _PAIRS[1:]:
        rank, world = _int(rank_name), _int(world_name)
        if rank is None and world is None:
            continue
        if rank is None or world is None:
            have, missing = (world_name, rank_name) if rank is None else (rank_name, world_name)
            raise ValueError(f"the environment sets {have}={os.environ[have]!r} but not {missing}: "
                             f"which shard this process reads is unknown. Pass rank= and "
                             "world_size=, or launch it as the launcher does")
        return (*_checked(rank, world, rank_name, world_name), source)
    if local is not None:
        raise ValueError(
            f"the environment sets LOCAL_RANK={os.environ['LOCAL_RANK']!r} but no world size "
            "(WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE) and torch.distributed is not "
            "initialised: which shard this process reads is unknown. Pass rank= and world_size=, "
            "launch with torchrun (it sets RANK and WORLD_SIZE), or build the loader after "
            "torch.distributed.init_process_group()")
    return None


def _lightning(local, world):
    """Lightning's subprocess launcher: WORLD_SIZE, LOCAL_RANK and NODE_RANK."""
    if world is None:
        return None
    node = _int("NODE_RANK") or _int("GROUP_RANK") or 0
    per_node = _int("LOCAL_WORLD_SIZE")
    if node == 0:
        rank = local
    elif per_node is not None:
        rank = node * per_node + local
    else:
        raise ValueError(
            f"the environment sets WORLD_SIZE={world}, LOCAL_RANK={local} and NODE_RANK={node} "
            "but neither RANK nor LOCAL_WORLD_SIZE: this process's rank is unknown. Set RANK, or "
            "build the loader after torch.distributed.init_process_group() (Lightning "
            "initialises it in trainer.fit: return the loader from the LightningModule's or "
            "DataModule's train_dataloader())")
    return (*_checked(rank, world, "LOCAL_RANK", "WORLD_SIZE"),
            "Lightning's launcher's LOCAL_RANK, NODE_RANK and WORLD_SIZE")


def resolve(rank, world_size):
    """(rank, world_size, source): the arguments given, the rest from
    torch.distributed or a launcher's environment, else 0 and 1."""
    if rank is not None and world_size is not None:
        return rank, world_size, ARGUMENTS
    dist = from_torch_distributed()
    if dist is not None:
        found = (*dist, TORCH_DISTRIBUTED)
    else:
        found = from_environment()
    if found is None:
        if rank is not None and not isinstance(rank, bool) and rank != 0:
            raise ValueError(
                f"rank={rank!r} is given without world_size, and the environment sets neither "
                "RANK nor WORLD_SIZE: pass world_size= (the number of processes), or run under "
                "torchrun, which sets both")
        return (0 if rank is None else rank), (1 if world_size is None else world_size), DEFAULT
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size), \
        found[2]


_said = set()


def say(rank, world_size, source):
    """One line on stderr, once per process and source, saying which shard a
    process reads and who said so (only where there is more than one)."""
    if world_size <= 1 or source in (ARGUMENTS, DEFAULT):
        return
    line = f"nostall: rank {rank} of {world_size}, from {source}"
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr, flush=True)
