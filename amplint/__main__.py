"""`python -m amplint`: the same entry point as the `amplint` console script."""
from ._start import main

if __name__ == "__main__":  # pragma: no branch
    main()
