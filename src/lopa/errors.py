"""Exception types of the public API.

Every failure a user can cause (bad arguments, a bad model or predictor file) raises a
subclass of :class:`LopaError`, so callers and the CLI can catch one type and the
engine stays usable afterwards.
"""


class LopaError(Exception):
    """Base class of every error lopa raises on purpose."""


class InvalidRequestError(LopaError, ValueError):
    """A generation request that cannot be served (empty prompt, bad sampling value, too long)."""


class ModelLoadError(LopaError, OSError):
    """A model (or predictor) path that is missing, truncated, or not a model of a supported kind."""


class UnsupportedModelError(LopaError):
    """A model whose forward cannot take tree verification (no 4D mask or static cache support)."""
