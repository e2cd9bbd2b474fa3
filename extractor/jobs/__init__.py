"""Runs over many texts: batch (rows, journal, progress), evaluation against gold files (metrics, diagnosis)."""
