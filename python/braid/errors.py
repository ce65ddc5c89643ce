"""braid's failures as Python exceptions.

Every error braid reports arrives as a subclass of braid.Error carrying the message the C++
library wrote (which operation, which rank, which peer and address, and what to try) and its
category in ``code`` (the name of braid::ErrorCode). Classes that match a built-in category
also derive from it, so ``except TimeoutError`` and ``except ConnectionError`` work too.
"""

import builtins


class Error(RuntimeError):
    """Base of every braid failure."""

    code = "internal"


class InvalidArgumentError(Error, ValueError):
    """Bad arguments or configuration (environment variables included)."""

    code = "invalid_argument"


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - braid.TimeoutError on purpose
    """A bounded wait expired (BRAID_TIMEOUT_S, BRAID_RENDEZVOUS_TIMEOUT_S)."""

    code = "timeout"


class PeerLostError(Error, ConnectionError):
    """A peer process died, reset its connection or went silent."""

    code = "peer_lost"


class MismatchError(Error):
    """Ranks called different collectives, counts, dtypes or roots."""

    code = "mismatch"


class AbortedError(Error):
    """The communicator was aborted, here or on another rank."""

    code = "aborted"


class SystemCallError(Error):
    """An operating-system call failed (errno in the message)."""

    code = "system"


class ProtocolError(Error):
    """Malformed or unexpected bytes from a peer."""

    code = "protocol"


class InternalError(Error):
    """A bug in braid: please report it with the message."""

    code = "internal"


class AuthenticationError(Error):
    """A peer did not prove it knows the job's secret (BRAID_SECRET)."""

    code = "unauthenticated"


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgumentError, TimeoutError, PeerLostError, MismatchError, AbortedError,
    SystemCallError, ProtocolError, InternalError, AuthenticationError)}


def class_for(code):
    """The exception class for a braid::ErrorCode name ("timeout", "peer_lost", ...)."""
    return _BY_CODE.get(code, Error)
