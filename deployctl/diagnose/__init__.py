"""`deployctl diagnose`: what to collect from each host (plan.py), turning the answers into bundle files
(bundle.py), redaction (redact.py) and known error signatures (signatures.py) are pure; collect.py is the edge
that runs one batch per host and writes the tar.gz."""
