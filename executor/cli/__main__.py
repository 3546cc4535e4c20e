"""``python -m executor.cli``: the ``toolpool`` command."""

from executor.cli import main

if __name__ == "__main__":
    main()
