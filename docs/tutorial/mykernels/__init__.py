"""The tutorial's kernel package (docs/tutorial.md)."""
