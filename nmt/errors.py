"""User-facing errors: the CLI prints them as one line and exits with code 2, no traceback."""


class NmtError(Exception):
    """Bad input or a refused operation; the message is shown to the user as is."""

    exit_code = 2


def check_format_version(path: object, version: object, newest: int, what: str) -> int:
    """The format version a file records (absent: 1, the files written before versions were
    recorded), refused in one line naming the file when this nmt is older than its writer."""
    found = 1 if version is None else version
    if isinstance(found, bool) or not isinstance(found, int) or not 1 <= found <= newest:
        raise NmtError(
            f"{path}: {what} format {found!r}; this nmt reads formats 1 to {newest} (a newer nmt "
            "wrote it)"
        )
    return found


def install_hint(extra: str) -> str:
    """How to add an optional extra: nmt installs from its source folder, not from an index."""
    return f"pip install -e '.[{extra}]' in nmt's source folder"
