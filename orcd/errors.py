"""Every error orcd raises on purpose. Messages are one line, meant for users.

The HTTP layer maps these to status codes; the CLI prints them without a traceback.
"""


class OrcdError(Exception):
    """Base class. `str(err)` is a one-line message for the user."""


class GGUFError(OrcdError):
    """The model file is unreadable, corrupt, or inconsistent."""


class UnsupportedArchitectureError(GGUFError):
    """`general.architecture` names a model family orcd has no implementation for."""


class UnsupportedQuantTypeError(GGUFError):
    """A tensor is stored in a GGML type orcd cannot dequantize."""


class TokenizerError(OrcdError):
    """The vocabulary in the file cannot be turned into a tokenizer."""


class TemplateError(OrcdError):
    """A chat template failed to render (syntax, sandbox violation, limits)."""


class LoadOptionError(OrcdError, ValueError):
    """A load option that cannot apply to this device or file (e.g. load_model's q6k_layout)."""


class RequestError(OrcdError):
    """A request is invalid (maps to HTTP 400). `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class ContextLengthExceededError(RequestError):
    """Prompt plus max_tokens does not fit the model's context."""

    def __init__(self, message: str, param: str | None = "max_tokens"):
        super().__init__(message, param=param, code="context_length_exceeded")
