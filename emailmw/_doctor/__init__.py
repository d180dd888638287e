"""``emailmw doctor``: facts from the transport's probe, each judged."""
