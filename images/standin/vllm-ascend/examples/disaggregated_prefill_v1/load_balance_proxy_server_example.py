"""Stand-in for vllm-ascend's P/D load-balancing proxy example (same argv): standin/proxy.py."""

import sys

sys.path.append("/opt/standin")  # the image's PYTHONPATH; kept should a `docker run -e PYTHONPATH=` clear it

from standin.proxy import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
