"""Simulator-independent pieces: the env protocol, episode I/O and frame conventions."""
