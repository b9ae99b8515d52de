"""Benchmarks of tierscope against its anchors (numpy baselines, LINE); run with ``make bench``."""
