"""A second held-out set (issue 25): wrong and right implementations written from the released
exercise texts alone, after the catalogues of benchmarks/heldout/ were built, by authors who did
not read the catalogues. Run with `bench_mistakes.py --set heldout2`."""
