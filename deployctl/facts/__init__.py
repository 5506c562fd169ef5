"""Pure parsers of vendor tool output into facts (frozen dataclasses)."""
