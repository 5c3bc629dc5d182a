"""Reconstruct survey spectra fibre by fibre, trained in place (the sample axis is the fibre).

``python -m examples.sdss`` writes a synthetic archive of spectra (flux and
inverse variance, ``(fibre, wavelength)``) stored twice, 64 spectra per
chunk and one spectrum per chunk, trains the same autoencoder on each
layout, compares what each read, and scores the autoencoder against PCA with
as many components on held-out fibres.
"""
