"""Soaks: hours of talk in minutes, with faults (`python -m scripts.bench.soak.faults`) or over TLS
(`python -m scripts.bench.soak.tls`)."""
