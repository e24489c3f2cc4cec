"""CLI subcommands (one module per top-level command)."""
