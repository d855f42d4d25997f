"""Errors that mean "the user asked for something we cannot do".

Command-line entry points turn a :class:`UsageError` into one line on stderr and
exit code 2 (argparse's convention), never a traceback.
"""


class UsageError(Exception):
    """Bad input from the user: flags, files, environment ids, checkpoints."""
