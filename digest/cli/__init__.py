"""The ``digest`` command line: one module per command group, output helpers."""
