"""The package version; cmd/splitzip says the same (a test checks)."""

__version__ = "0.4.0"
