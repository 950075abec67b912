"""Entry point for ``python -m bench``."""

from bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
