# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by gqla.

Every failed library call raises a subclass of :class:`Error` chosen by the C
status code. Subclasses also derive from the built-in exception a Python user
would catch for that failure (``InvalidArgument`` is a ``ValueError``,
``OutOfMemory`` a ``MemoryError``, ``NotFound`` a ``KeyError``), so generic
handlers keep working. The message is the library's own, naming the argument
and what was expected.
"""


class Error(RuntimeError):
    """A gqla call failed.

    Attributes:
        status: the numeric ``gqla_status`` code.
        message: the library's message (``gqla_last_error_message()``).
    """

    status = 0

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self):
        # KeyError would otherwise print the message in quotes.
        return self.message


class InvalidArgument(Error, ValueError):
    """A bad shape, dtype, stride, NULL, or out-of-range value (GQLA_ERR_INVALID_ARGUMENT)."""

    status = 1


class OutOfMemory(Error, MemoryError):
    """A host or device allocation failed (GQLA_ERR_OUT_OF_MEMORY)."""

    status = 2


class CapacityError(Error):
    """The page pool or another sized limit is exhausted (GQLA_ERR_CAPACITY)."""

    status = 3


class Unsupported(Error):
    """A valid request this build or device cannot serve, e.g. CUDA absent (GQLA_ERR_UNSUPPORTED)."""

    status = 4


class NotFound(Error, KeyError):
    """Unknown sequence id (GQLA_ERR_NOT_FOUND)."""

    status = 5


class InvalidState(Error):
    """The call is not allowed now, e.g. weights not set or session closed (GQLA_ERR_INVALID_STATE)."""

    status = 6


class BackendError(Error):
    """oneDNN, the CUDA driver or cuBLAS reported a failure (GQLA_ERR_BACKEND)."""

    status = 7


class InternalError(Error):
    """A bug in gqla; please report it (GQLA_ERR_INTERNAL)."""

    status = 8


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgument, OutOfMemory, CapacityError, Unsupported, NotFound,
    InvalidState, BackendError, InternalError)}


def make_error(status, message):
    """The exception instance for a failed call (used by the extension)."""
    return _BY_STATUS.get(status, Error)(message, status)
