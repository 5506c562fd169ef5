"""Pure planning: spec + facts -> plan (data only, no I/O)."""
