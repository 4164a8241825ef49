"""A third held-out set (issue 25): wrong and right implementations written from the released
exercise texts alone, after the generic diagnosers and the catalogue entries that the first two
sets prompted, by authors who read neither the catalogues nor the earlier sets. Run with
`bench_mistakes.py --set heldout3`."""
