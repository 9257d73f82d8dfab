"""turngate state: the dispatch state machine (pure) and its stores (I/O)."""
