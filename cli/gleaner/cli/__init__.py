"""The ``gleaner`` command line: one entry point, one module per subcommand (lazy-loaded)."""
