"""The torch.distributed backend "braid".

    import braid.torch
    torch.distributed.init_process_group(backend="braid", ...)

Importing this module registers the backend. torch then calls the creator below for the
default group and for every new_group() this rank is a member of, with the group's store.
"""
import os
import secrets
import time
from datetime import timedelta

import torch.distributed as dist

from . import _c10d
from .. import errors

BACKEND_NAME = "braid"
_SECRET_KEY = "braid/job_secret"


def _rendezvous_timeout(group_timeout_s):
    """How long this group's rendezvous may wait, and what says so: BRAID_RENDEZVOUS_TIMEOUT_S
    when set (braid itself rejects a bad value later), else torch's timeout for the group, as
    it bounds gloo's rendezvous."""
    value = os.environ.get("BRAID_RENDEZVOUS_TIMEOUT_S")
    if value is None:
        return group_timeout_s, "torch's timeout= (BRAID_RENDEZVOUS_TIMEOUT_S overrides it)"
    try:
        return max(1.0, float(value)), "BRAID_RENDEZVOUS_TIMEOUT_S"
    except ValueError:
        return group_timeout_s, "torch's timeout= (BRAID_RENDEZVOUS_TIMEOUT_S overrides it)"


def _share_secret(store, rank, size, group_timeout_s):
    """Gives every rank the same job secret when the environment has none.

    braid's connections prove knowledge of the job's secret (BRAID_SECRET). When the user set
    none, rank 0 of the first group draws one and publishes it in torch's store; every rank puts
    it in its environment before braid first reads its settings. It is as private as torch's
    store is, which is not authenticated: set BRAID_SECRET (or BRAID_SECRET_FILE) yourself on
    a shared network.
    """
    if os.environ.get("BRAID_SECRET") or os.environ.get("BRAID_SECRET_FILE"):
        return
    if rank == 0:
        # set, not compare_set: torch 1.13's TCPStore does not wake a get() waiting for a key
        # that compare_set creates.
        store.set(_SECRET_KEY, secrets.token_hex(32))
    else:
        # torch's get waits only the group's timeout, and rank 0 may spend all of it inside
        # torch's TCPStore waiting for WORLD_SIZE processes (when fewer were started): wait as
        # long as braid's rendezvous would, then say what rank 0 was expected to do.
        wait_s, limit = _rendezvous_timeout(group_timeout_s)
        start = time.monotonic()
        try:
            store.wait([_SECRET_KEY], timedelta(seconds=wait_s))
        except RuntimeError as e:
            said = f"torch's store said: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            waited = time.monotonic() - start
            if waited < wait_s - 1:
                raise errors.PeerLostError(
                    f"rendezvous: rank {rank} of world size {size} lost torch's store after {waited:.0f} s of "
                    f"waiting for rank 0 to start the braid group: the process serving it (rank 0 for tcp:// "
                    f"and env://, or torchrun's agent) has probably exited; its output says why ({said})") from None
            raise errors.TimeoutError(
                f"rendezvous: rank {rank} of world size {size} waited {wait_s:g} s in torch's store for rank 0 "
                f"to start the braid group, and it did not. Is rank 0 running, started with the same "
                f"world size ({size}) and init_method? {limit} sets the limit ({said})") from None
    os.environ["BRAID_SECRET"] = store.get(_SECRET_KEY).decode()


def _create(options, pg_options=None):
    """torch's creator (extended API): options carry store, group_rank, group_size, timeout
    and group_id, the group's name, which tells braid's rendezvous the groups apart."""
    timeout = options.timeout
    if isinstance(timeout, timedelta):
        timeout_ms = int(timeout.total_seconds() * 1000)
    else:
        timeout_ms = int(timeout * 1000)
    _share_secret(options.store, options.group_rank, options.group_size, timeout_ms / 1000)
    return _c10d.create(options.store, options.group_rank, options.group_size, timeout_ms,
                        str(options.group_id))


def _register():
    plugins = getattr(dist.Backend, "_plugins", {})
    if BACKEND_NAME.upper() in plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)


_register()
