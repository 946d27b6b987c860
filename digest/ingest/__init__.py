"""Ingestion: sources, fetching (httpx), normalising (feedparser), storing entries, samples."""
