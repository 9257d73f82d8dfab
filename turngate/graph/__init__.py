"""The message graph (MessageSequence.v1), its validator and stream assembler. Pure: no I/O."""
