"""The embedded model and the speculative decoding engine."""
