"""A model's lifecycle (create, fork, delete, export, import), its stored history and its learner."""
