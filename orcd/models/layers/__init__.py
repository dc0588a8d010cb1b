"""Building blocks shared by every architecture: one concern per file."""
