"""The one exception type for mistakes a user can make or fix."""


class SparkmlParError(Exception):
    """A problem the user can act on: the message names the thing, the value and the fix."""


class ConfigError(SparkmlParError):
    """A configuration key, value or file that cannot be used."""
