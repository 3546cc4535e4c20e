"""toolpool's tests. A package, so that test support is imported as ``tests.support``."""
