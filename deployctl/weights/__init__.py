"""Model weights: the source (parsed, listed on the control machine), the manifest a host keeps, and the
host-side fetcher program (weights_fetch.py) that `execute.weights` runs with pre-signed URLs."""
