"""The registry's one error: an operator used with inputs or parameters it does not accept."""


class OpError(ValueError):
    """An operator was used with inputs or parameters it does not accept."""


def require(cond: bool, msg: str) -> None:
    """Raise :class:`OpError` with ``msg`` unless ``cond`` holds."""
    if not cond:
        raise OpError(msg)
