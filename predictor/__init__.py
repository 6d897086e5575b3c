"""Peak-memory forecasting and the early out-of-memory warning."""
