"""The fourth held-out set: written from the exercise texts alone, unseen while the checks grew."""
