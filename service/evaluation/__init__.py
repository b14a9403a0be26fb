"""The online evaluation: prequential scores, held-out evaluation sets and the accuracy matrix."""
