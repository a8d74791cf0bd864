"""The `pollwarden` command line, one module per concept; `pollwarden.cli:main` is the console script."""

from .app import main

__all__ = ["main"]
