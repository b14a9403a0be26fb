"""What every write of a model goes through: the update lock, the ``Idempotency-Key``, its outcome counted."""
