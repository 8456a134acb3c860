"""CLI subcommands: each module has ``register(subparsers)`` and a handler ``run(args) -> int``."""
