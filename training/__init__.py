"""allday training side: data building, training entry points and the CLI."""
