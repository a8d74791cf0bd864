"""The wire: one request's client, its sockets, parser and selector, name resolution, credentials and TLS trust,
webhook delivery."""
