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


# One row per braid::ErrorCode: class name, code, the built-in it also is (or None), docstring.
# The classes are made from these rows below, so adding a code is adding a row.
_CLASSES = (
    ("InvalidArgumentError", "invalid_argument", ValueError,
     "Bad arguments or configuration (environment variables included)."),
    ("TimeoutError", "timeout", builtins.TimeoutError,
     "A bounded wait expired (BRAID_TIMEOUT_S, BRAID_RENDEZVOUS_TIMEOUT_S)."),
    ("PeerLostError", "peer_lost", ConnectionError,
     "A peer process died, reset its connection or went silent."),
    ("MismatchError", "mismatch", None,
     "Ranks called different collectives, counts, dtypes or roots."),
    ("AbortedError", "aborted", None,
     "The communicator was aborted, here or on another rank."),
    ("SystemCallError", "system", None,
     "An operating-system call failed (errno in the message)."),
    ("ProtocolError", "protocol", None,
     "Malformed or unexpected bytes from a peer."),
    ("InternalError", "internal", None,
     "A bug in braid: please report it with the message."),
    ("AuthenticationError", "unauthenticated", None,
     "A peer did not prove it knows the job's secret (BRAID_SECRET)."),
)


def _make(name, code, builtin, doc):
    bases = (Error,) if builtin is None else (Error, builtin)
    return type(name, bases, {"__doc__": doc, "__module__": __name__, "code": code})


_BY_CODE = {}
for _row in _CLASSES:
    _cls = _make(*_row)
    globals()[_cls.__name__] = _cls  # braid.TimeoutError shadows the built-in on purpose
    _BY_CODE[_cls.code] = _cls
del _row, _cls

__all__ = ["Error", "class_for"] + [row[0] for row in _CLASSES]


def class_for(code):
    """The exception class for a braid::ErrorCode name ("timeout", "peer_lost", ...)."""
    return _BY_CODE.get(code, Error)
