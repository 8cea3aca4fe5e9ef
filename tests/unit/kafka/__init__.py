"""Unit tests of daemon.kafka."""
