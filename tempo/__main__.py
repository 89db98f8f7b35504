"""``python -m tempo``: the same as the ``tempo`` command."""
from tempo.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
