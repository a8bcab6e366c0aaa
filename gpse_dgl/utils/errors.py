"""Exceptions whose message is shown to users as one line by the CLI."""


class GPSEError(Exception):
    """Base class: the CLI prints ``gpse-dgl: error: <message>`` and exits with ``exit_code``, no traceback.

    Status 2 means the input or the command line was wrong (fix it and run again); subclasses for
    failures during a run set 1.
    """

    exit_code = 2


class DatasetNotFoundError(GPSEError, FileNotFoundError):
    """A dataset is not on disk; the message says where to put it or how to fetch it."""


class RecipeError(GPSEError, ValueError):
    """A recipe is malformed; the message names the file and the key."""


class CheckpointError(GPSEError, ValueError):
    """A checkpoint cannot be read or does not fit the model; the message names the tensor."""


class GraphTooLargeError(GPSEError, MemoryError):
    """A computation would need more memory than its configured limit (message names the limit)."""


class InputDataError(GPSEError, ValueError):
    """Input graphs or values the computation cannot use: none at all, no nodes, NaN or Inf."""


class RunFailedError(GPSEError):
    """A run failed after it started (not a usage error): the CLI exits with status 1."""

    exit_code = 1
