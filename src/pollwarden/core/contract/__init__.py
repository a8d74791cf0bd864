"""The contract file: read, its variables substituted, checked and built into a `Contract`."""
