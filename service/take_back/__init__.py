"""Take a batch back: the model rebuilt by replay without it, committed as a new version."""
