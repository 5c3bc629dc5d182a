"""insitu's examples: each trains a small model in place and checks it beats a simple baseline.

Run one with ``python -m examples.<name>`` from the repository root
(``--help`` lists its flags); ``nox -s examples`` runs them all in smoke mode.
"""
