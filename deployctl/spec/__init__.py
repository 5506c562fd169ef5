"""The deployment spec: schema, loader with line numbers, model, rules."""
