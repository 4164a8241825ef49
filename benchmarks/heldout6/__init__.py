"""The sixth held-out set: wrong and right implementations written from the exercise texts alone."""
