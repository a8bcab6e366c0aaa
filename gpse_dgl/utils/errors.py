"""Exceptions whose message is shown to users as one line by the CLI."""


class GPSEError(Exception):
    """Base class: the CLI prints ``error: <message>`` and exits with status 2, no traceback."""


class DatasetNotFoundError(GPSEError, FileNotFoundError):
    """A dataset is not on disk; the message says where to put it or how to fetch it."""


class RecipeError(GPSEError, ValueError):
    """A recipe is malformed; the message names the file and the key."""


class CheckpointError(GPSEError, ValueError):
    """A checkpoint cannot be read or does not fit the model; the message names the tensor."""


class GraphTooLargeError(GPSEError, MemoryError):
    """A computation would need more memory than its configured limit (message names the limit)."""
