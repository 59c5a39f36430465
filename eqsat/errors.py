"""Errors a user can fix: a bad file, a bad option, a model eqsat does not support.

Every such error derives from :class:`EqsatError`; its message says what happened and what to do, on one
line. The ``eqsat`` command prints it as ``eqsat: error: <message>`` and exits with status 2. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class EqsatError(Exception):
    """An error the user can fix; the message says what happened and what to do."""


class UsageError(EqsatError, ValueError):
    """A command-line option or path that cannot work (a directory given as output file, a bad shape)."""


class OutputError(EqsatError, OSError):
    """An output file cannot be written once the work is done (no permission, disk full); the message names
    the user's path."""


class ModelLoadError(EqsatError, ValueError):
    """The model cannot be imported (malformed file, dynamic shape, unsupported construct)."""


class ModelReadError(ModelLoadError):
    """The file is not a readable ONNX model (missing, empty, truncated, not ONNX, empty graph)."""


class InputShapeError(ModelLoadError):
    """An ``--input-shape`` (``input_shapes``) entry is invalid: unknown name, bad or conflicting dimensions."""


class DynamicShapeError(ModelLoadError):
    """A shape is not static: an input with symbolic dimensions, or a tensor ONNX cannot infer statically."""


class UnsupportedModelError(ModelLoadError):
    """The model uses a construct eqsat cannot optimize (control flow, no default-domain opset)."""


__all__ = ["EqsatError", "UsageError", "OutputError", "ModelLoadError", "ModelReadError", "InputShapeError",
           "DynamicShapeError", "UnsupportedModelError"]
