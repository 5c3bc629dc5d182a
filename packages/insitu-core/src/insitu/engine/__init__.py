"""Running a pass: the loader (fetch, decode, transform), the pool and its persisted tier,
streaming scatter, batch gather and the epoch run that ties them together."""
