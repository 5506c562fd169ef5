#!/bin/sh
# Stand-in for the vendor's P/D launcher: same arguments and environment, and like the vendor's script
# the role (prefill, decode or scheduler) comes from the local ranktable in RANK_TABLE_FILE_PATH.
# The image sets PYTHONPATH; the fallback covers a `docker run -e PYTHONPATH=` that cleared it.
PYTHONPATH="${PYTHONPATH:-/opt/standin}"
export PYTHONPATH
exec "${STANDIN_PYTHON:-python3}" -m standin.start_servers "$@"
