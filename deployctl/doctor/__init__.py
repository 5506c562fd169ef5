"""`deployctl doctor`: which hosts to check and with what (targets), gathering facts (gather), the safe
repairs (fix) and the report (report). The rules themselves are pure, in checks*.py (here)."""
