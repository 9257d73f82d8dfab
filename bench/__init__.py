"""turngate benchmarks: each module prints its figures and ratios; none is a timed test."""
