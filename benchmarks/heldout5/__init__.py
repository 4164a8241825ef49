"""The fifth held-out set: written from the exercise texts alone, unseen while the checks grew."""
