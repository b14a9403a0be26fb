"""Learn a batch (queued, learned and committed in groups) and predict with the served model."""
