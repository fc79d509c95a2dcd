"""The release of llmsim (``llmsim --version``; pyproject.toml carries the same)."""

__version__ = "0.1.0"
