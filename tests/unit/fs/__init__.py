"""Unit tests of daemon.fs."""
