"""Unit tests of daemon.engine."""
