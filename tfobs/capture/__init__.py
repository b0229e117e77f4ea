"""Step markers, the window schedule, and the profiler session."""
