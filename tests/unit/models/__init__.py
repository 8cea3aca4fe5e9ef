"""Unit tests of daemon.models."""
