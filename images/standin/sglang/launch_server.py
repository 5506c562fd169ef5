"""`python -m sglang.launch_server ...`: SGLang's server command line, served by the stand-in (standin/sglang_server.py)."""

import sys

from standin.sglang_server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
