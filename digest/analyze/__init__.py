"""Analysis, pure: the phrase taxonomy, classification, clustering, scoring."""
