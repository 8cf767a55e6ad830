"""The store's one error type: a request it cannot satisfy, with the reason."""


class StoreError(Exception):
    """A request the store cannot satisfy; the message says why."""
