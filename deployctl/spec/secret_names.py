"""The env names that hold secrets (data): one list, read by `validate` (a WARN on a literal value) and by
`export` (a literal would be written into a manifest in the clear, so it is refused)."""

from __future__ import annotations

import re

# Each fragment matches a whole `_`-separated part of a name, or the end of one (HFTOKEN, DBPASSWORD), so that
# TOKENIZERS_PARALLELISM and MAX_NUM_BATCHED_TOKENS, which hold no secret, are not taken for one.
SECRET_NAME_FRAGMENTS = (
    "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "API_KEY", "APIKEY", "ACCESS_KEY", "SECRET_KEY",
    "PRIVATE_KEY", "SIGNING_KEY", "ENCRYPTION_KEY", "CREDENTIAL", "CREDENTIALS", "AUTH", "AUTHORIZATION",
    "AUTH_HEADER", "BEARER", "COOKIE", "SESSION_KEY", "CLIENT_SECRET", "CONNECTION_STRING", "DSN",
)
_PATTERN = re.compile(r"(?:^|_)[A-Z0-9]*(?:" + "|".join(map(re.escape, SECRET_NAME_FRAGMENTS)) + r")(?:_|$)",
                      re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """True when an env variable of this name most likely holds a secret (HF_TOKEN, AWS_SECRET_ACCESS_KEY)."""
    return _PATTERN.search(name) is not None
