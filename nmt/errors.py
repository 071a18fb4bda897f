"""User-facing errors: the CLI prints them as one line and exits with code 2, no traceback."""


class NmtError(Exception):
    """Bad input or a refused operation; the message is shown to the user as is."""

    exit_code = 2


def install_hint(extra: str) -> str:
    """How to add an optional extra: nmt installs from its source folder, not from an index."""
    return f"pip install -e '.[{extra}]' in nmt's source folder"
