"""One error family for everything memory raises.

Every error is a ``MemoryStoreError``; the kinds that come from bad input are also
``ValueError``. The names end in ``Error`` (PEP 8, ruff N818), so a copied folder
passes a linter that checks it.
"""

from __future__ import annotations


class MemoryStoreError(Exception):
    """Base class of every memory error."""


class InvalidCallerIdError(MemoryStoreError, ValueError):
    """A caller id that is empty, too long or has characters outside the allowed set."""


class WithheldCallerIdError(InvalidCallerIdError):
    """A caller id that stands for a withheld number ("anonymous", Twilio's
    +266696687): no memory is kept under it (``callers.WITHHELD_CALLER_IDS``)."""


class InvalidFactError(MemoryStoreError, ValueError):
    """A fact whose kind or value is empty or too long."""


class InvalidStoreUrlError(MemoryStoreError, ValueError):
    """A MEMORY_URL that names no backend, or that the backend refuses."""


class StoreUnavailableError(MemoryStoreError):
    """The store cannot be reached or used right now (file gone, server down,
    timeout)."""


class SchemaMismatchError(MemoryStoreError):
    """The store's schema is older or newer than this code, or is not a memory store;
    the message says what to run."""


class ServiceUnavailableError(StoreUnavailableError):
    """The service did not answer in time, could not be reached, answered 5xx, or
    refused the key or the plan (401, 402, 403): worth retrying later."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimitedError(ServiceUnavailableError):
    """429: ``retry_after`` seconds to wait (from Retry-After, else a backoff)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, 429)
        self.retry_after = retry_after


class ServiceRejectedError(MemoryStoreError, ValueError):
    """The service refused the request itself (400, 404, 409, 413, 422): retrying the
    same request cannot help. The item stays in the spool, marked rejected."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


FAIL_OPEN = (Exception,)
"""What memory's fail-open code catches: any failure of a store, a model answer or a
hook becomes "no memory this time", logged once, and never reaches the call. Named
once, so every such catch says it is deliberate (a cancellation, which is not an
``Exception``, still goes through)."""
