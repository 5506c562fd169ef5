"""The env names that hold secrets (data): one list, read by `validate` (a WARN on a literal value) and by
`export` (a literal would be written into a manifest in the clear, so it is refused)."""

from __future__ import annotations

import re

# Each fragment matches a whole `_`-separated part of a name, or the end of one (HFTOKEN, DBPASSWORD, OPENAIKEY),
# so that TOKENIZERS_PARALLELISM and MAX_NUM_BATCHED_TOKENS, which hold no secret, are not taken for one. The
# keywords are the secret scanners': gitleaks' generic-api-key rule (key, token, secret, passwd, password, auth:
# gitleaks cmd/generate/config/rules/generic.go) and detect-secrets' KeywordDetector (pwd, pass, private_key,
# credential-like names: Yelp/detect-secrets detect_secrets/plugins/keyword.py DENYLIST). KEY and PWD alone
# cover MYSQL_PWD, OPENAI_KEY and every *_API_KEY / *_ACCESS_KEY.
SECRET_NAME_FRAGMENTS = (
    "SECRET", "PASSWORD", "PASSWD", "PWD", "PASS", "PASSPHRASE", "TOKEN", "KEY", "CREDENTIAL", "CREDENTIALS",
    "CREDS", "AUTH", "AUTHORIZATION", "AUTH_HEADER", "BEARER", "COOKIE", "CONNECTION_STRING", "DSN",
)
# Names that match a fragment and hold no secret: the shell's working directories (POSIX sh: PWD, OLDPWD).
NOT_SECRET = ("PWD", "OLDPWD")
_PATTERN = re.compile(r"(?:^|_)[A-Z0-9]*(?:" + "|".join(map(re.escape, SECRET_NAME_FRAGMENTS)) + r")(?:_|$)",
                      re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """True when an env variable of this name most likely holds a secret (HF_TOKEN, MYSQL_PWD, OPENAI_KEY)."""
    return name.upper() not in NOT_SECRET and _PATTERN.search(name) is not None
