"""build_digest(date): the pipeline that turns a window's entries into a stored digest."""
