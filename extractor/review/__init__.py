"""The review loop: a confidence on every value, a queue for the doubtful ones, corrections into the pool."""
