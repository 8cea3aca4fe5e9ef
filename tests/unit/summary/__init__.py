"""Unit tests of daemon.summary."""
