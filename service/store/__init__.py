"""What is stored and how: the tables, the cached reads of a model, its guarded writes, the version watch."""
