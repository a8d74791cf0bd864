"""The operator console: operations, open decisions with their options as buttons, stories, audit status."""

from pollwarden.console.server import ConsoleServer, is_loopback, serve_until_signalled

__all__ = ["ConsoleServer", "is_loopback", "serve_until_signalled"]
