"""Unit tests of daemon.ops."""
