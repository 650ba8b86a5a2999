"""`python -m mirrorwatch ...`: the same command as the `mirrorwatch` console script."""

from mirrorwatch.cli import main

if __name__ == "__main__":
    main()
