"""Parser stage: sources, envelope formats, records, and the grammar that classifies messages into events."""
