"""Segment cells in an OME-NGFF volume, trained in place plane by plane (the sample axis is Z).

``python -m examples.microscopy`` writes a synthetic OME-Zarr image (cells with
texture, blur, uneven illumination and noise) with a label image, then trains
a small U-Net on random patches of the training planes and compares it with
Otsu thresholding on held-out planes. ``--store URL`` does the same on a real
OME-NGFF image that has a ``labels/`` group (an IDR image, by default).
"""
