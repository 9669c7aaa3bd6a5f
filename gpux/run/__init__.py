"""Opening built artifacts with ordered fallback (the Session) and the in-use locks of running processes."""
