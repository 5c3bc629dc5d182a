"""Tests of the examples: their data definitions against the source arrays, and their smoke runs."""
