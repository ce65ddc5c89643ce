"""braid: collective communication for distributed training, from Python.

    import braid, numpy as np
    comm = braid.init()                 # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, braidrun)
    grad = np.ones(1024, dtype=np.float32)
    comm.all_reduce(grad, op="sum")     # in place, zero-copy; the GIL is released while braid waits

Buffers are any C-contiguous buffer-protocol object (numpy arrays, bytearray, memoryview,
array.array) or torch CPU tensors; the dtype is taken from the object. See docs/python.md.
"""

from braid import errors
from braid._core import Communicator, Op, Work
from braid._core import features as _features
from braid._core import version as _version
from braid.errors import (AbortedError, AuthenticationError, Error, InternalError,
                          InvalidArgumentError, MismatchError, PeerLostError, ProtocolError,
                          SystemCallError, TimeoutError)

__version__ = _version()

__all__ = [
    "init", "features", "Communicator", "Work", "Op", "errors", "Error", "InvalidArgumentError",
    "TimeoutError", "PeerLostError", "MismatchError", "AbortedError", "SystemCallError",
    "ProtocolError", "InternalError", "AuthenticationError",
]


def init(url=None, rank=-1, size=-1):
    """Join the job and return its Communicator once every rank has joined.

    With no url, from the environment like braid::Communicator::from_env (torchrun, braidrun,
    Slurm, Open MPI variables). Otherwise url is "env://", "tcp://host:port" or
    "file:///path", and rank and size are needed unless the environment has them.
    """
    from braid import _core
    if url is None:
        if rank != -1 or size != -1:
            return _core.from_url("env://", rank, size)
        return _core.from_env()
    return _core.from_url(url, rank, size)


def features():
    """The optional features this build has: {"io_uring": True, "ib": False, ...}."""
    pairs = (item.rsplit(" ", 1) for item in _features().split(", "))
    return {name: value == "yes" for name, value in pairs}
