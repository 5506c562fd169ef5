"""`python -m vllm.entrypoints.openai.api_server ...`: the mixed-mode command line, served by the stand-in."""

import sys

from standin.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], launcher="api_server"))
