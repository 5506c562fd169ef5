"""`deployctl bench`: a load generator for OpenAI-compatible endpoints, its metrics, reports and baseline gate."""
