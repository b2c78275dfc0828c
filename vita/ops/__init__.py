"""Operations: logs, metrics and the turn log."""
