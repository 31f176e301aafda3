"""The error for bad data: where it is (file and line, or record) and what is wrong.

Every reader of the package raises it for a problem with its input, so that
a command can report any of them the same way: "train.csv:12: ...".
"""


class ConversionError(ValueError):
    """A problem with the input data, located by file and line (or record)."""

    def __init__(self, location: str, message: str) -> None:
        """Initialize the error.

        location (str): Where the problem is, e.g. "train.csv:12" or
            "fold0.json:record 3"; a bare path for a whole-file problem.
        message (str): What is wrong, naming the offending value.
        """
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}")
