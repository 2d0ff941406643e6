"""Search drivers: exact branch-and-bound and the exhaustive reference."""
