"""Command-line front end: one thin module per command (argument parsing and
formatting only; the logic lives in the library)."""
