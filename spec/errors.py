"""The spec's own error classes.

Every public function of every backend raises one of these for bad input. They
subclass the builtin a Python user would expect (ValueError, TypeError,
NotImplementedError), so ``except ValueError`` keeps working. Error vectors
name the class by its name here, e.g. ``"error": "ShapeError"``.
"""


class AttnSpecError(Exception):
    """Base class of every error attnspec raises on purpose."""


class ShapeError(AttnSpecError, ValueError):
    """An input has the wrong rank, widths that do not match, or does not broadcast."""


class ParameterError(AttnSpecError, ValueError):
    """A parameter is missing, unexpected, or has the wrong shape (message names its path)."""


class ConfigError(AttnSpecError, ValueError):
    """An attribute is out of range or inconsistent (heads not dividing width, bad p, bad k...)."""


class DomainError(AttnSpecError, ValueError):
    """An input value is outside the domain (token id out of vocabulary, position past max_len...)."""


class DTypeError(AttnSpecError, TypeError):
    """An input has a dtype the component does not accept."""


class DeviceError(AttnSpecError, ValueError):
    """A device is unavailable, unknown, or an input lives on another device."""


class NotImplementedComponent(AttnSpecError, NotImplementedError):
    """A backend does not implement a spec function (reported as ``missing``)."""


class VectorFileError(AttnSpecError, ValueError):
    """A vector file is missing, malformed, or its SHA-256 does not match the manifest."""


class BackendError(AttnSpecError, RuntimeError):
    """A backend cannot be found or loaded."""


ERROR_CLASSES = {
    cls.__name__: cls
    for cls in (
        AttnSpecError, ShapeError, ParameterError, ConfigError, DomainError,
        DTypeError, DeviceError, NotImplementedComponent, VectorFileError, BackendError,
    )
}
