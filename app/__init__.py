"""meshplan HTTP service: FastAPI API, SQLModel persistence, search runner and CLI."""

from importlib import metadata

try:
    __version__ = metadata.version("meshplan")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
