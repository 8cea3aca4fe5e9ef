"""The watched folder: its source (inbox watching, claims, names) and its sink (outbox, failed)."""
