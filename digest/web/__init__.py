"""The web archive (Starlette): pages, JSON API, subscription flow, static export."""
