"""Typed errors for everything a user can get wrong. The CLI prints their message on one line, exit code 2."""


class ResoMapError(Exception):
    """Base class: a problem the user can fix; the message says what to fix."""


class ConfigError(ResoMapError, ValueError):
    """A config file, preset or override is invalid."""


class UnknownNameError(ResoMapError, KeyError):
    """A name not in a registry; the message lists the close valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DataError(ResoMapError):
    """A dataset is missing, empty or unreadable."""


class CheckpointError(ResoMapError):
    """A checkpoint is corrupt, unsafe, or does not match the model, resolution or classes."""


class DeviceError(ResoMapError):
    """The requested device is not available."""


class TrainingError(ResoMapError):
    """Training cannot go on (for example the loss became NaN)."""


class ModelError(ResoMapError):
    """A model cannot be built or inspected as asked (for example no layer fit for a CAM at that resolution)."""


class ExplainError(ResoMapError):
    """An explainer cannot run on this model or input (for example a CAM on a model with no spatial layer)."""


class BusyError(ResoMapError):
    """Another process holds what this one needs (the same sweep running elsewhere in the same folder)."""
