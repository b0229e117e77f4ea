"""Exceptions tfobs raises to its callers (never into a training step)."""


class CaptureError(ValueError):
    """A capture could not be read: missing, empty, truncated or not an XSpace."""


class ConfigError(ValueError):
    """A bad option given to `tfobs.enable()` or the command line."""
