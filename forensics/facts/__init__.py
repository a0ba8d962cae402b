"""Facts established once per host and run from the timeline."""
