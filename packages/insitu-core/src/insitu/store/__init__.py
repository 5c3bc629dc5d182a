"""Getting bytes out of a store: opening stores by URL, their capabilities, fetching chunks
with the one retry layer, chunk keys, codecs and the event loop the reads run on."""
