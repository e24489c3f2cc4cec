"""VLM2VLA manipulation policies (issue #5)."""
