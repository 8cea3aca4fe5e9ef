"""Operations: metrics and the HTTP endpoint, logging, throttled warnings, file-descriptor exhaustion,
systemd notify."""
