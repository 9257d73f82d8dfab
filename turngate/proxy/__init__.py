"""turngate proxy: the aiohttp app, upstream client and stream relay."""
