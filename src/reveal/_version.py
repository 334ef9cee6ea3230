"""The package's version: a leaf module (it imports nothing), so that any module can say
which Reveal wrote something without importing the package's front (``reveal/__init__``).
pyproject.toml reads the version from here."""

__version__ = "0.1.0"
