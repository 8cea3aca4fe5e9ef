"""Unit tests of daemon.intake."""
