"""Ranktables: the pure core (model, build, merge, check). No I/O here; commands/ranktable.py does that."""
