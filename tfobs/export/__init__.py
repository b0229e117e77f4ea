"""Publishing window summaries: Prometheus, OpenTelemetry, the overview page."""
