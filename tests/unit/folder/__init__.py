"""Unit tests of daemon.folder."""
