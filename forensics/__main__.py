"""``python -m forensics``: the same entry point as the ``forensics`` command (it exits with the code)."""

from forensics.cli import main

main()
