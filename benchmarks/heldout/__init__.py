"""Held-out wrong (and one right) implementation per exercise, written from the exercise texts only."""
