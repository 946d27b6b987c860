"""The domain: layers, items, windows, errors, views, the clock. No I/O; standard library only."""
