"""Signals that feed a window outside the capture itself."""
