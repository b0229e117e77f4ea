"""Reading XSpace captures without TensorFlow: planes, lines, events, stats."""
