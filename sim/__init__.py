"""allday simulation."""
