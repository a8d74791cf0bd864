"""The worker fleet: the worker, its supervisor of processes, its defaults and its log."""
