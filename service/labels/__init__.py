"""Labels that arrive later: rows remembered at a prediction, learned once their labels come."""
