"""Vision-and-language navigation agents (AlldayWalker, issue #6)."""
