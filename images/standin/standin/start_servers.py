"""`python -m standin.start_servers ...`: what the P/D start_servers.sh runs; the role comes from the ranktables."""

import sys

from standin.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], launcher="start_servers"))
