"""Unit tests of daemon.document."""
