"""What an array is: geometry, discovery from zarr metadata, chunk layout, CF decoding,
selections, static fields, lazily read coordinates and the chunk-transform contract."""
