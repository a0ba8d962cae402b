"""``python -m forensics``: the same entry point as the ``forensics`` command (it exits with the code)."""

from forensics.cli import main

# guarded: a tool that imports every module (pytest's doctest collection, an import audit) must not run the command
if __name__ == "__main__":
    main()
