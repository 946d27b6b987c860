"""Rendering: one Jinja2 environment, every output format, splitting and escaping."""
